"""A run's report: training curves as a PNG and one HTML page with the tables."""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_history(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_curves(history: list[dict], out: Path) -> None:
    epochs = [h["epoch"] for h in history]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, key, title in zip(
        axes,
        ["loss", "train_top1", "lr", "clips_per_s"],
        ["training loss", "training top-1", "learning rate", "clips/s (all workers)"],
        strict=True,
    ):
        ax.plot(epochs, [h[key] for h in history], marker="o")
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _table(rows: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def write_report(
    metrics_path: str | Path,
    history_path: str | Path,
    manifest_path: str | Path,
    plan_path: str | Path,
    out_dir: str | Path,
) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = json.loads(Path(metrics_path).read_text())
    history = read_history(history_path)
    manifest = json.loads(Path(manifest_path).read_text())
    plan = json.loads(Path(plan_path).read_text())
    plot_curves(history, out / "curves.png")
    ref = metrics.get("reference") or {}
    result_rows = [
        ("recipe", metrics["recipe"]),
        ("videos", metrics["num_videos"]),
        ("protocol", metrics["protocol"]),
        ("top-1", f"{metrics['top1']:.4f}"),
        ("top-5", f"{metrics['top5']:.4f}"),
        ("reference top-1", ref.get("top1")),
        ("reference source", ref.get("source")),
    ]
    unit = "images" if manifest.get("kind") == "image" else "videos"
    data_rows = [(f"{split} {unit} (failed)", f"{s[unit]} ({s['failed']})") for split, s in manifest["splits"].items()]
    data_rows += [(f"failure: {f['path']}", f["error"]) for f in manifest["failures"]]
    plan_rows = [(f"{r['role']} {r['rank']}", r["host"]) for r in plan["roles"]]
    last = history[-1] if history else {}
    train_rows = [
        ("epochs", last.get("epoch")),
        ("final loss", f"{last.get('loss', float('nan')):.4f}"),
        ("clips/s", f"{last.get('clips_per_s', float('nan')):.1f}"),
    ]
    title = f"clipflow: {html.escape(metrics['recipe'])}"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:1.5em}}
th,td{{border:1px solid #ccc;padding:4px 10px;text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>clipflow run: {html.escape(metrics["recipe"])}</h1>
<h2>Evaluation</h2>{_table(result_rows)}
<h2>Training</h2><img src="curves.png" alt="training curves">{_table(train_rows)}
<h2>Data</h2>{_table(data_rows)}
<h2>Cluster plan</h2>{_table(plan_rows)}
</body></html>
"""
    (out / "report.html").write_text(page, encoding="utf-8")
    return out / "report.html"
