"""The trainer's history (metrics.jsonl, one JSON record an epoch), read and checked for what the report
draws."""

from __future__ import annotations

import json
from pathlib import Path

from clipflow.errors import ClipflowError

REQUIRED = ("epoch", "loss", "lr", "clips_per_s", "data_time", "step_time")


def read_history(path: Path) -> list[dict]:
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise ClipflowError(f"training history {path} does not exist; run the train stage first") from None
    history = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                history.append(json.loads(line))
            except ValueError:
                raise ClipflowError(f"training history {path} line {number} is not JSON: {line[:80]!r}") from None
    for number, record in enumerate(history, 1):
        missing = [key for key in REQUIRED if not isinstance(record, dict) or key not in record]
        if missing:
            raise ClipflowError(f"training history {path} record {number} has no {', '.join(missing)}: "
                                "is it the train stage's metrics.jsonl?")  # fmt: skip
    if not history:
        raise ClipflowError(f"training history {path} has no epoch in it")
    return history
