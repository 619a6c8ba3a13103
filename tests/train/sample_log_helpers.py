"""The per-sample log (CLIPFLOW_SAMPLE_LOG) reduced to what each epoch trained: lines of attempts a later attempt
went back over are dropped (it resumed from a checkpoint at or before their step), the rest counted per epoch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def read_lines(folder: Path) -> list[tuple[int, int, int, int, str, float]]:
    rows = []
    for path in sorted(folder.glob("worker*.tsv")):
        for line in path.read_text().splitlines():
            attempt, epoch, step, slot, video, weight = line.split("\t")
            rows.append((int(attempt), int(epoch), int(step), int(slot), video, float(weight)))
    return rows


def trained_per_epoch(folder: Path) -> dict[int, Counter]:
    """Per epoch, how often each video was trained (weight > 0) by the steps that count: for each step the last
    attempt's lines, and no line of an attempt at a step a later attempt also began at or before."""
    rows = read_lines(folder)
    first_step = {}
    for attempt, _, step, *_ in rows:
        first_step[attempt] = min(step, first_step.get(attempt, step))
    kept = [r for r in rows if not any(a > r[0] and s <= r[2] for a, s in first_step.items())]
    counts: dict[int, Counter] = {}
    for _, epoch, _, _, video, weight in kept:
        if weight > 0:
            counts.setdefault(epoch, Counter())[video] += 1
    return counts
