"""Kinetics annotation CSVs (`label,youtube_id,time_start,time_end,split`) as video lists.

Each row names one clip, stored as `{youtube_id}_{time_start:06d}_{time_end:06d}.mp4`
either directly under the video root or in a folder named after its label (with
spaces, or with spaces turned into underscores as some download scripts do).
Labels become indices by a class list sorted by name, kept in `classes.txt` so
train and val share it. Videos that are not on disk stay in the lists: the scan
reports each as "file not found". Every error names the CSV and its line, a byte that is not
UTF-8 too.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.textfile import read_text

REQUIRED_COLUMNS = ("youtube_id", "time_start", "time_end", "split")
SPLITS = ("train", "val", "test")
UNLABELLED_SPLIT = "test"  # the official test CSVs hold their labels back
NO_LABEL = -1  # the label of an unlabelled test row; scan such entries without num_classes
_WHOLE_SECONDS = re.compile(r"\d+(\.0*)?")


@dataclass(frozen=True)
class KineticsRow:
    label: str | None  # None for a test row without a label
    youtube_id: str
    time_start: int  # seconds
    time_end: int
    split: str
    source: str  # the CSV it came from, for messages
    line: int  # 1-based line in that CSV

    @property
    def where(self) -> str:
        return f"{self.source} line {self.line}"

    @property
    def filename(self) -> str:
        return f"{self.youtube_id}_{self.time_start:06d}_{self.time_end:06d}.mp4"


def _parse_csv_line(text: str, where: str) -> list[str]:
    """The fields of one CSV line; quoted fields may hold commas."""
    try:
        return [f.strip() for f in next(csv.reader([text], strict=True))]
    except csv.Error as exc:
        raise ClipflowError(f"{where}: not a valid CSV line ({exc}): {text!r}") from None


def _column_positions(header: list[str], where: str) -> dict[str, int]:
    """Column name -> position; the label column may be absent (official test CSVs), the others may not."""
    positions = {name: i for i, name in enumerate(header)}
    missing = [name for name in REQUIRED_COLUMNS if name not in positions]
    if missing:
        raise ClipflowError(
            f"{where}: header lacks column(s) {', '.join(missing)}; "
            f"expected 'label,{','.join(REQUIRED_COLUMNS)}', got {','.join(header)!r}"
        )
    return positions


def _seconds(text: str, column: str, where: str) -> int:
    """A time written as whole seconds (`14` or `14.0`)."""
    if not _WHOLE_SECONDS.fullmatch(text):
        raise ClipflowError(f"{where}: {column} must be a whole, non-negative number of seconds, got {text!r}")
    return int(float(text))


def _row(fields: list[str], columns: dict[str, int], source: str, line: int) -> KineticsRow:
    """Checks one data line's fields and turns them into a row."""
    where = f"{source} line {line}"
    if len(fields) != len(columns):
        raise ClipflowError(f"{where}: expected {len(columns)} columns as in the header, got {len(fields)}")
    split = fields[columns["split"]]
    if split not in SPLITS:
        raise ClipflowError(f"{where}: unknown split {split!r}, expected one of {', '.join(SPLITS)}")
    youtube_id = fields[columns["youtube_id"]]
    if not youtube_id:
        raise ClipflowError(f"{where}: empty youtube_id")
    start = _seconds(fields[columns["time_start"]], "time_start", where)
    end = _seconds(fields[columns["time_end"]], "time_end", where)
    if end <= start:
        raise ClipflowError(f"{where}: time_end {end} must be after time_start {start}")
    label = fields[columns["label"]] if "label" in columns else ""
    if not label and split != UNLABELLED_SPLIT:
        raise ClipflowError(f"{where}: a {split} row needs a label")
    return KineticsRow(label or None, youtube_id, start, end, split, source, line)


def read_annotations(csv_path: str | Path) -> list[KineticsRow]:
    """Reads and checks a Kinetics annotation CSV; blank lines are skipped."""
    path = Path(csv_path)
    lines = read_text(path, "annotation file", encoding="utf-8-sig").splitlines()
    numbered = [(number, text) for number, text in enumerate(lines, start=1) if text.strip()]
    if not numbered:
        raise ClipflowError(f"annotation file {path} is empty; expected a header 'label,{','.join(REQUIRED_COLUMNS)}'")
    header_line, header_text = numbered[0]
    header_where = f"{path} line {header_line}"
    columns = _column_positions(_parse_csv_line(header_text, header_where), header_where)
    rows = [_row(_parse_csv_line(text, f"{path} line {n}"), columns, str(path), n) for n, text in numbered[1:]]
    if not rows:
        raise ClipflowError(f"annotation file {path} has a header but no rows")
    return rows


def class_names(rows: list[KineticsRow]) -> list[str]:
    """The labels that occur in rows, sorted by name: position = class index."""
    return sorted({r.label for r in rows if r.label is not None})


def write_classes(path: str | Path, classes: list[str]) -> None:
    """Writes one class name per line (line number - 1 = index), atomically."""
    from clipflow.data.datasets.lists import classes_text

    write_text_atomic(path, classes_text(classes))


def read_classes(path: str | Path) -> list[str]:
    """Reads a class-index file written by write_classes; blank or repeated names are errors."""
    path = Path(path)
    classes: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(read_text(path, "class-index file").splitlines(), start=1):
        name = raw.strip()
        if not name:
            raise ClipflowError(f"{path} line {number}: empty class name (line number - 1 is the class index)")
        if name in seen:
            raise ClipflowError(f"{path} line {number}: class {name!r} already on line {seen[name]}")
        seen[name] = number
        classes.append(name)
    if not classes:
        raise ClipflowError(f"class-index file {path} is empty")
    return classes


def video_path(root: str | Path, row: KineticsRow) -> str:
    """Where the row's video is, relative to root: `<label>/<file>`, `<label_with_underscores>/<file>` or `<file>`.

    When none exists the row keeps a path all the same (in its label's folder if that
    folder exists, else directly under root) so that the scan reports it as missing.
    """
    root = Path(root)
    folders = [] if row.label is None else list(dict.fromkeys([row.label, row.label.replace(" ", "_")]))
    candidates = [f"{folder}/{row.filename}" for folder in folders] + [row.filename]
    for rel in candidates:
        if (root / rel).is_file():
            return rel
    for folder in folders:
        if (root / folder).is_dir():
            return f"{folder}/{row.filename}"
    return row.filename


def row_entry(row: KineticsRow, label: int, root: str | Path) -> VideoEntry:
    """The list entry of a row: its video's path under root (see video_path), its label, its CSV line."""
    return VideoEntry(video_path(root, row), label, None, row.line)


def to_entries(rows: list[KineticsRow], classes: list[str], root: str | Path) -> dict[str, list[VideoEntry]]:
    """Entries per split, in CSV order; label = index in classes, NO_LABEL for unlabelled test rows."""
    index = {name: i for i, name in enumerate(classes)}
    by_split: dict[str, list[VideoEntry]] = {}
    for row in rows:
        if row.label is None:
            label = NO_LABEL
        elif row.label in index:
            label = index[row.label]
        else:
            raise ClipflowError(f"{row.where}: label {row.label!r} is not in the class index ({len(classes)} classes)")
        by_split.setdefault(row.split, []).append(row_entry(row, label, root))
    return by_split


def load_kinetics(
    csv_path: str | Path, root: str | Path, classes_file: str | Path | None = None
) -> tuple[dict[str, list[VideoEntry]], list[str]]:
    """Entries per split and the class list: from classes_file when given (shared by train and val),
    else from the CSV's own labels (write it with write_classes for the other splits)."""
    rows = read_annotations(csv_path)
    classes = read_classes(classes_file) if classes_file is not None else class_names(rows)
    return to_entries(rows, classes, root), classes


@dataclass
class KineticsList:
    """One list made from one annotation CSV."""

    csv: str
    entries: list[VideoEntry]  # the labelled rows in CSV order, paths relative to the video root
    unlabelled: int  # rows without a label (test split): left out, since a list needs a label
    missing: list[VideoEntry]  # entries whose video is not under the root; they stay in entries


@dataclass
class KineticsLists:
    classes: list[str]
    classes_from: str  # where the class index came from, for messages
    lists: dict[str, KineticsList]  # "train", "val"


def _check_labels(rows_by_csv: dict[str, list[KineticsRow]], index: dict[str, int], classes_from: str) -> None:
    """Every label must be in the class index; the error names the first missing one, its CSV line and the rest."""
    missing: dict[str, KineticsRow] = {}
    for rows in rows_by_csv.values():
        for row in rows:
            if row.label is not None and row.label not in index:
                missing.setdefault(row.label, row)
    if missing:
        name, row = next(iter(missing.items()))
        others = list(missing)[1:]
        more = f"; {len(others)} more label(s) missing too: {', '.join(map(repr, others[:5]))}" if others else ""
        more += ", ..." if len(others) > 5 else ""
        raise ClipflowError(
            f"{row.where}: label {name!r} is not in the class index ({classes_from}, {len(index)} classes){more}"
        )


def kinetics_lists(
    train_csv: str | Path, val_csv: str | Path, root: str | Path, classes_file: str | Path | None = None
) -> KineticsLists:
    """The train and val lists of two annotation CSVs with one shared class index.

    The index is classes_file when given (it must then hold every label of both CSVs),
    else the sorted labels of the train CSV (every val label must be among them). Every
    labelled row of a CSV goes to its list whatever its split column says; unlabelled
    (test) rows are counted and left out. Rows whose video is not under root stay in the
    list, so that the scan reports each as "file not found", and are counted as missing.
    """
    root = Path(root)
    if not root.is_dir():
        raise ClipflowError(f"video root {root} is not a folder")
    rows_by_csv = {"train": read_annotations(train_csv), "val": read_annotations(val_csv)}
    if classes_file is not None:
        classes, classes_from = read_classes(classes_file), f"from {classes_file}"
    else:
        classes, classes_from = class_names(rows_by_csv["train"]), f"the sorted labels of {train_csv}"
    index = {name: i for i, name in enumerate(classes)}
    _check_labels(rows_by_csv, index, classes_from)
    lists = {}
    for split, rows in rows_by_csv.items():
        source = str(train_csv if split == "train" else val_csv)
        labelled = [row for row in rows if row.label is not None]
        if not labelled:
            raise ClipflowError(f"{source} has no labelled rows ({len(rows)} unlabelled test rows); lists need labels")
        entries = [row_entry(row, index[row.label], root) for row in labelled]
        missing = [e for e in entries if not (root / e.path).is_file()]
        lists[split] = KineticsList(source, entries, len(rows) - len(labelled), missing)
    return KineticsLists(classes, classes_from, lists)


def write_kinetics_lists(train_csv: str | Path, val_csv: str | Path, root: str | Path, classes: str | Path | None,
                         out_dir: str | Path, log=print) -> KineticsLists:  # fmt: skip
    """The annotation CSVs as ``path label`` lists (train_labels.txt, val_labels.txt) and classes.txt in
    ``out_dir``, as the scan reads them (:func:`clipflow.data.datasets.lists.write_dataset`: someone else's file of
    one of these names there is refused before the CSVs are read); logs what was made and the videos not found."""
    from clipflow.data.datasets.lists import DatasetLists, check_out, write_dataset

    check_out(out_dir)
    made = kinetics_lists(train_csv, val_csv, root, classes or None)
    notes = [f"{split}: {made_list.unlabelled} unlabelled (test) rows of {made_list.csv} left out"
             for split, made_list in made.lists.items() if made_list.unlabelled]  # fmt: skip
    write_dataset(DatasetLists("Kinetics", made.classes, made.classes_from, Path(root),
                               {split: made_list.entries for split, made_list in made.lists.items()},
                               {split: made_list.csv for split, made_list in made.lists.items()}, notes),
                  out_dir, log)  # fmt: skip
    return made
