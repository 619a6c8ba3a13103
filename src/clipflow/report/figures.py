"""The report's figures as PNG files: training curves, throughput, scaling.

Sized to be read on a screen without zooming: 13 inches wide at 100 dpi (1,300 pixels),
11-point text.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from clipflow.files import write_bytes_atomic  # noqa: E402
from clipflow.report.scaling import ScalingPoint  # noqa: E402

DPI = 100
WIDTH_IN = 13.0
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.grid": True, "grid.alpha": 0.3}


def _save(fig, out: Path) -> Path:
    """The figure drawn in memory, then written whole to ``out`` (:func:`write_bytes_atomic`: a full disk is one line
    with the bytes it needed, and no file under ``out``'s name)."""
    fig.tight_layout()
    drawn = io.BytesIO()
    try:
        fig.savefig(drawn, dpi=DPI, format=out.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    write_bytes_atomic(out, drawn.getvalue())
    return out


def _by_epoch(ax, label: str = "epoch") -> None:
    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of the records that have ``key`` (validation runs every eval_every epochs only)."""
    kept = [h for h in history if h.get(key) is not None]
    return [h["epoch"] for h in kept], [h[key] for h in kept]


def plot_curves(history: list[dict], out: Path) -> Path:
    """Loss, top-1 (training and validation) and learning rate against the epoch."""
    with plt.rc_context(STYLE):
        fig, (loss, top1, lr) = plt.subplots(1, 3, figsize=(WIDTH_IN, 4.0))
        for ax, title, lines in (
            (loss, "loss", [("loss", "training"), ("val_loss", "validation")]),
            (top1, "top-1 accuracy", [("train_top1", "training"), ("val_top1", "validation")]),
            (lr, "learning rate (end of epoch)", [("lr", "lr")]),
        ):
            for key, label in lines:
                epochs, values = _series(history, key)
                if values:
                    ax.plot(epochs, values, marker="o", label=label)
            ax.set_title(title)
            _by_epoch(ax)
            if len(lines) > 1:
                ax.legend()
        return _save(fig, out)


def wait_share(data_s: float, compute_s: float) -> float:
    """The share of a worker's time it waited for data: data / (data + compute); 0 when it has no time."""
    total = data_s + compute_s
    return data_s / total if total > 0 else 0.0


def time_split(history: list[dict]) -> tuple[list[int], list[float], list[float]]:
    """Every worker's rank, its seconds waiting for data and its compute seconds, summed over the run's epochs; a
    history from before per-worker figures: rank 0's (the epochs' own data and step times)."""
    per_worker = [h.get("workers") or [] for h in history]
    ranks = sorted({w["rank"] for ws in per_worker for w in ws})
    if not ranks:
        return [0], [sum(h["data_time"] for h in history)], [sum(h["step_time"] for h in history)]
    data = [sum(w["data_time"] for ws in per_worker for w in ws if w["rank"] == r) for r in ranks]
    compute = [sum(w["step_time"] for ws in per_worker for w in ws if w["rank"] == r) for r in ranks]
    return ranks, data, compute


def plot_throughput(history: list[dict], out: Path) -> Path:
    """Clips/s of every worker and of all together against the epoch; each worker's data-loading seconds
    against its compute seconds over the run, with its share of waiting for data."""
    with plt.rc_context(STYLE):
        fig, (speed, split) = plt.subplots(1, 2, figsize=(WIDTH_IN, 4.0))
        epochs = [h["epoch"] for h in history]
        speed.plot(epochs, [h["clips_per_s"] for h in history], marker="o", color="black", label="all workers")
        per_worker = [h.get("workers") or [] for h in history]
        ranks = sorted({w["rank"] for ws in per_worker for w in ws})
        for rank in ranks:
            points = [(h["epoch"], w["clips_per_s"]) for h in history for w in h.get("workers") or []
                      if w["rank"] == rank]  # fmt: skip
            speed.plot([e for e, _ in points], [v for _, v in points], marker=".", label=f"worker {rank}")
        speed.set_title("throughput (clips/s)")
        _by_epoch(speed)
        speed.legend(fontsize=9)
        ranks, data, compute = time_split(history)
        labels = [f"worker {r}\n{100 * wait_share(d, c):.0f}% waiting"
                  for r, d, c in zip(ranks, data, compute, strict=True)]  # fmt: skip
        split.barh(labels, compute, color="tab:blue", label="compute (forward, backward, gradient exchange, update)")
        split.barh(labels, data, left=compute, color="tab:orange", label="waiting for data")
        split.set_title("where each worker's time went (s, whole run)")
        split.set_xlabel("seconds")
        split.legend(fontsize=9, loc="lower right")
        return _save(fig, out)


def plot_scaling(points: list[ScalingPoint], out: Path) -> Path:
    """Speed-up and efficiency against the worker count, relative to the smallest count measured."""
    base = points[0]
    with plt.rc_context(STYLE):
        fig, (speedup, efficiency) = plt.subplots(1, 2, figsize=(WIDTH_IN, 4.0))
        workers = [p.workers for p in points]
        speedup.plot(workers, [p.workers / base.workers for p in points], "--", color="gray", label="ideal")
        speedup.plot(workers, [p.speedup(base) for p in points], marker="o", label="measured")
        speedup.set_title(f"speed-up against {base.workers} worker{'s' if base.workers > 1 else ''}")
        speedup.set_xlabel("workers")
        speedup.set_xticks(workers)
        speedup.legend()
        efficiency.plot(workers, [100 * p.efficiency(base) for p in points], marker="o")
        efficiency.axhline(100, ls="--", color="gray")
        efficiency.set_ylim(0, max(110, 5 + max(100 * p.efficiency(base) for p in points)))
        efficiency.set_title("scaling efficiency (%)")
        efficiency.set_xlabel("workers")
        efficiency.set_xticks(workers)
        return _save(fig, out)


def plot_confusion(matrix: list[list[int]], names: list[str], out: Path) -> Path:
    """The video-level confusion matrix, each row as shares of its true class."""
    n = len(matrix)
    shares = [[c / (sum(row) or 1) for c in row] for row in matrix]
    side = min(WIDTH_IN, max(5.0, 0.35 * n + 2.5))
    with plt.rc_context({**STYLE, "axes.grid": False}):
        fig, ax = plt.subplots(figsize=(side + 1.5, side))
        image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
        if n <= 40:
            ax.set_xticks(range(n), names, rotation=90, fontsize=9)
            ax.set_yticks(range(n), names, fontsize=9)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title("confusion (share of each true class)")
        fig.colorbar(image, ax=ax, fraction=0.046)
        return _save(fig, out)


def plot_restarts(attempts: list[dict], out: Path) -> Path:
    """The attempts of a run as bars over time (seconds since the first started), one row each: green when it
    finished, red when it failed, with its worker count inside and its cause at the failure."""
    zero = min(a["started"] for a in attempts)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.2 + 0.6 * len(attempts)))
        for row, a in enumerate(attempts):
            start, length = a["started"] - zero, max(a["ended"] - a["started"], 0.0)
            ax.barh(row, length, left=start, color="tab:green" if a["code"] == 0 else "tab:red", alpha=0.8)
            ax.text(start + length / 2, row, f"{a['workers']} workers", ha="center", va="center", fontsize=9)
            if a["code"]:
                ax.text(start + length, row, f"  {a['cause'] or 'exit ' + str(a['code'])}", va="center", fontsize=9)
        ax.set_yticks(range(len(attempts)), [f"attempt {a['attempt']}" for a in attempts])
        ax.invert_yaxis()
        ax.set_xlabel("seconds since the first attempt started")
        ax.set_title("attempts of the run (green: finished, red: failed, with the cause)")
        ax.set_xlim(right=max(a["ended"] for a in attempts) - zero + 0.6 * (max(a["ended"] for a in attempts) - zero))
        return _save(fig, out)
