"""Runs of one recipe with different worker counts, for the report's scaling figure.

A run is a folder ``results/<run>/`` with an evaluation (``metrics.json``: its recipe) and a
training history (``train/metrics.jsonl``: its clips/s, its clips per worker a step; the worker
count from the records' per-worker figures, else ``cluster/plan.json``). Runs are compared when
they share the recipe and the clips per worker, so the global batch grows with the workers as the
linear scaling rule has it. A run's throughput is the median clips/s of its
epochs after the first (the first pays for start-up: loader processes, allocations); a run of
one epoch gives that epoch's. Of several runs with the same worker count the newest counts.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.report.history import read_history


@dataclass(frozen=True)
class ScalingPoint:
    run: str
    workers: int
    clips_per_s: float

    def speedup(self, base: ScalingPoint) -> float:
        return self.clips_per_s / base.clips_per_s

    def efficiency(self, base: ScalingPoint) -> float:
        """Speed-up over the ideal one (workers / base workers)."""
        return self.speedup(base) / (self.workers / base.workers)


def _read_run(folder: Path) -> tuple[tuple, ScalingPoint, float] | None:
    """((recipe, per-worker batch), point, mtime) of a finished run folder; None for anything else."""
    try:
        recipe = json.loads((folder / "metrics.json").read_text())["recipe"]
        history = read_history(folder / "train/metrics.jsonl")
        workers = (
            len(history[-1].get("workers") or [])
            or json.loads((folder / "cluster/plan.json").read_text())["num_workers"]
        )
    except (ClipflowError, OSError, ValueError, KeyError, TypeError):
        return None
    speeds = [h["clips_per_s"] for h in history]
    speed = statistics.median(speeds[1:] or speeds)
    kind = (recipe, history[-1].get("batch_size"))
    return kind, ScalingPoint(folder.name, int(workers), float(speed)), (folder / "train/metrics.jsonl").stat().st_mtime


def scaling_points(results: Path, recipe: str, batch_size: int | None) -> list[ScalingPoint]:
    """One point per worker count among the finished runs under ``results`` of ``recipe`` at ``batch_size``
    clips per worker, by worker count."""
    newest: dict[int, tuple[float, ScalingPoint]] = {}
    for folder in sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []:
        found = _read_run(folder)
        if found and found[0] == (recipe, batch_size):
            _, point, mtime = found
            if point.workers not in newest or mtime > newest[point.workers][0]:
                newest[point.workers] = (mtime, point)
    return [newest[w][1] for w in sorted(newest)]
