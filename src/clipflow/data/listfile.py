"""Video list files: GluonCV's `path num_frames label` and the shorter `path label`.

Fields are separated by spaces (or commas, for PySlowFast CSVs). Paths are relative
to a root folder unless absolute. A path may hold spaces, as Kinetics' label folders
do (`passing American football (in game)/x.mp4 0`), when it ends in a file extension:
the last one or two fields are then the numbers. With a class index (``classes``), a label may be a class name
(`jump/a.mp4 jumping jacks`): the longest name the line ends with. Every error names the file and the line: a
byte that is not UTF-8, a line of the wrong shape, a label that is no class index (with ``num_classes``), a list
numbered from 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.textfile import read_text


@dataclass(frozen=True)
class VideoEntry:
    path: str  # as written in the list
    label: int
    num_frames: int | None = None  # None until a scan has counted them
    line: int = 0  # line number in the list it came from (1-based), for messages

    def resolve(self, root: str | Path) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else Path(root) / p


NUM_CLASSES_SETTING = "the recipe's model.num_classes; data scan's --num-classes"  # where a user sets it
_EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")
_COUNTED = re.compile(r"(.+\.[A-Za-z0-9]+)[ \t,]+([+-]?\d+)")  # a path with its extension, then a frame count


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


def read_list(path: str | Path, num_classes: int | None = None, classes: list[str] | None = None) -> list[VideoEntry]:
    """Reads a list file. With `num_classes`, its labels are checked as class indices (:func:`check_labels`); with
    ``classes`` (a class index), a label may be a class name."""
    path = Path(path)
    if not path.exists():
        raise ClipflowError(f"list file {path} does not exist; check the data settings (train_list / val_list)")
    entries: list[VideoEntry] = []
    for number, raw in enumerate(read_text(path, "list file").splitlines(), start=1):
        text = raw.strip()
        if text and not text.startswith("#"):
            entries.append(_entry(text, f"{path} line {number}", number, classes))
    if not entries:
        raise ClipflowError(f"list file {path} has no entries")
    check_labels(entries, path, num_classes)
    return entries


def parse_line(text: str, where: str) -> VideoEntry:
    """One list line (as :func:`list_text` writes it) as an entry; a bad line is an error naming ``where``."""
    return _entry(text.strip(), where, 0)


def _named(text: str, classes: list[str]) -> tuple[str, int] | None:
    """(the line without its label, the label) when ``text`` ends in a class name of ``classes`` after a space or a
    comma (the longest such name), else None."""
    ends = [(len(name), i) for i, name in enumerate(classes)
            if text.endswith(name) and len(text) > len(name) and text[-len(name) - 1] in " \t,"]  # fmt: skip
    if not ends:
        return None
    size, label = max(ends)
    return text[: -size - 1].rstrip(" \t,"), label


def _entry(text: str, where: str, number: int, classes: list[str] | None = None) -> VideoEntry:
    """One list line as an entry; a line of the wrong shape is an error naming ``where`` (file and line). With
    ``classes``, a line whose label is a class name has that name's index."""
    named = _named(text, classes) if classes and not _is_int(re.split(r"[\s,]", text)[-1]) else None
    if named is not None:
        head, label = named
        counted = _COUNTED.fullmatch(head)  # `path num_frames name`
        fields = [*(counted.groups() if counted else [head]), str(label)]
    else:
        fields = _split_fields(text)
    if len(fields) not in (2, 3):
        raise ClipflowError(
            f"{where}: expected 'path num_frames label' or 'path label', got {len(fields)} fields: {text!r}"
        )
    try:
        label = int(fields[-1])
        frames = int(fields[1]) if len(fields) == 3 else None
    except ValueError:
        names = " (or a class name of the class index)" if classes else ""
        raise ClipflowError(
            f"{where}: label and frame count must be integers{names}, got {text!r}"
            + (
                ""
                if classes
                else "; to write class names as labels, give their class index (data.classes, one name a line)"
            )
        ) from None
    if label < 0:
        raise ClipflowError(f"{where}: label {label} is out of range: labels are class indices, 0 or more")
    if frames is not None and frames <= 0:
        raise ClipflowError(f"{where}: frame count {frames} must be positive")
    return VideoEntry(fields[0], label, frames, number)


def check_labels(entries: list[VideoEntry], source: str | Path, num_classes: int | None) -> None:
    """Labels are class indices, 0 to num_classes - 1. A list numbered from 1 (its labels exactly 1 to
    num_classes) is refused as such; any other label of num_classes or more is named with its line, how many
    more there are and, when no label is 0, the hint that the list may be numbered from 1. Nothing is checked
    without ``num_classes``."""
    if num_classes is None:
        return
    outside = [e for e in entries if e.label >= num_classes]
    if not outside:
        return
    labels = {e.label for e in entries}
    if labels == set(range(1, num_classes + 1)):
        raise ClipflowError(
            f"{source} line {outside[0].line}: label {num_classes}: the list is numbered from 1 (its labels run "
            f"1..{num_classes}, none is 0), but labels are class indices 0..{num_classes - 1} for num_classes "
            f"{num_classes}; renumber it from 0 (subtract 1 from every label)"
        )
    first, top = outside[0], max(labels)
    more = f" ({len(outside) - 1} more line(s) have labels of {num_classes} or more)" if len(outside) > 1 else ""
    from_one = "; no label is 0: if the list is numbered from 1, subtract 1 from every label" if 0 not in labels else ""
    raise ClipflowError(
        f"{source} line {first.line}: label {first.label} is out of range for num_classes {num_classes} (labels "
        f"are class indices 0..{num_classes - 1}){more}; correct the label, or, if the data has {top + 1} classes, "
        f"set num_classes ({NUM_CLASSES_SETTING}) to {top + 1}{from_one}"
    )


def labels_text(entries: list[VideoEntry]) -> str:
    """The short format (`path label`), as the scan reads it before it has counted the frames."""
    return "".join(f"{e.path} {e.label}\n" for e in entries)


def list_text(entries: list[VideoEntry]) -> str:
    """GluonCV's format (`path num_frames label`); every entry must have its frame count."""
    lines = []
    for e in entries:
        if e.num_frames is None:
            raise ValueError(f"{e.path} has no frame count; scan the videos first")
        lines.append(f"{e.path} {e.num_frames} {e.label}\n")
    return "".join(lines)


def write_labels(path: str | Path, entries: list[VideoEntry]) -> None:
    """Writes :func:`labels_text` to ``path`` (atomically)."""
    write_text_atomic(path, labels_text(entries))


def write_list(path: str | Path, entries: list[VideoEntry]) -> None:
    """Writes :func:`list_text` to ``path`` (atomically)."""
    write_text_atomic(path, list_text(entries))
