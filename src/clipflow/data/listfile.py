"""Video list files: GluonCV's `path num_frames label` and the shorter `path label`.

Fields are separated by spaces (or commas, for PySlowFast CSVs). Paths are relative
to a root folder unless absolute. A path may hold spaces, as Kinetics' label folders
do (`passing American football (in game)/x.mp4 0`), when it ends in a file extension:
the last one or two fields are then the numbers. Every error names the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic


@dataclass(frozen=True)
class VideoEntry:
    path: str  # as written in the list
    label: int
    num_frames: int | None = None  # None until a scan has counted them
    line: int = 0  # line number in the list it came from (1-based), for messages

    def resolve(self, root: str | Path) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else Path(root) / p


_EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def _split_fields(text: str) -> list[str]:
    if "," in text and " " not in text.strip():
        return [f.strip() for f in text.split(",")]
    fields = text.split()
    if len(fields) > 2:
        numbers = 2 if _is_int(fields[-2]) else 1
        path = text.strip().rsplit(None, numbers)[0]  # the spaces inside the path kept as they are
        if any(c.isspace() for c in path) and _EXTENSION.search(path):
            return [path, *fields[-numbers:]]
    return fields


def read_list(path: str | Path, num_classes: int | None = None) -> list[VideoEntry]:
    """Reads a list file. With `num_classes`, labels outside [0, num_classes) are an error."""
    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"list file {path} does not exist; check the data settings (train_list / val_list)")
    entries: list[VideoEntry] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        fields = _split_fields(text)
        where = f"{path} line {number}"
        if len(fields) not in (2, 3):
            raise ClipflowError(
                f"{where}: expected 'path num_frames label' or 'path label', got {len(fields)} fields: {text!r}"
            )
        try:
            label = int(fields[-1])
            frames = int(fields[1]) if len(fields) == 3 else None
        except ValueError:
            raise ClipflowError(f"{where}: label and frame count must be integers, got {text!r}") from None
        if label < 0 or (num_classes is not None and label >= num_classes):
            bound = f"[0, {num_classes})" if num_classes is not None else "non-negative"
            raise ClipflowError(f"{where}: label {label} is out of range, must be {bound}")
        if frames is not None and frames <= 0:
            raise ClipflowError(f"{where}: frame count {frames} must be positive")
        entries.append(VideoEntry(fields[0], label, frames, number))
    if not entries:
        raise ClipflowError(f"list file {path} has no entries")
    return entries


def write_labels(path: str | Path, entries: list[VideoEntry]) -> None:
    """Writes the short format (`path label`), as the scan reads it before it has counted the frames."""
    write_text_atomic(path, "".join(f"{e.path} {e.label}\n" for e in entries))


def write_list(path: str | Path, entries: list[VideoEntry]) -> None:
    """Writes GluonCV's format (`path num_frames label`); every entry must have its frame count."""
    lines = []
    for e in entries:
        if e.num_frames is None:
            raise ValueError(f"{e.path} has no frame count; scan the videos first")
        lines.append(f"{e.path} {e.num_frames} {e.label}\n")
    write_text_atomic(path, "".join(lines))
