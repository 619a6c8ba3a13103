"""The trainer's history (metrics.jsonl, one JSON record an epoch), read and checked for what the report
draws."""

from __future__ import annotations

from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.jsonl import record_lines

REQUIRED = ("epoch", "loss", "lr", "clips_per_s", "data_time", "step_time")
EXPECTED = "one JSON object an epoch, as the train stage writes its metrics.jsonl"
WHAT = "training history"


def read_history(path: Path) -> list[dict]:
    """Every epoch's record; a file that is missing, not UTF-8, has a line that is not a JSON object or a
    record without the fields the report draws, is a ClipflowError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        raise ClipflowError(f"{WHAT} {path} does not exist; run the train stage first")
    records = list(record_lines(path, WHAT, EXPECTED))  # every line JSON first, then the fields
    for number, record in records:
        missing = [key for key in REQUIRED if key not in record]
        if missing:
            raise ClipflowError(f"{WHAT} {path} line {number} has no {', '.join(missing)}: "
                                "is it the train stage's metrics.jsonl?")  # fmt: skip
    if not records:
        raise ClipflowError(f"{WHAT} {path} has no epoch in it")
    return [record for _, record in records]
