"""The index of a ``cifar-10-batches-py`` folder: list lines that name images, and index_cifar, which
writes the train and val lists, classes.txt and the manifest.

Index lists: the project's list-file format (clipflow.data.listfile, GluonCV's
``path num_frames label``), an image being ``BATCH#INDEX 1 LABEL``: image INDEX
(0-based row) of batch file BATCH (relative to the ``cifar-10-batches-py`` folder,
or absolute), one frame. For example ``data_batch_1#17 1 6``. read_list and
write_list take these lines as they are: ``#`` starts a comment only at the start of
a line, and a path without spaces is the first field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clipflow.data.cifar.batches import META_FILE, NUM_CLASSES, TEST_FILE, TRAIN_FILE, read_batch, read_label_names
from clipflow.data.listfile import VideoEntry, list_text
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir
from clipflow.made import Made


def image_path(batch_file: str, index: int) -> str:
    """The list path of image ``index`` of ``batch_file``: ``data_batch_1#17``."""
    return f"{batch_file}#{index}"


def parse_image_path(path: str) -> tuple[str, int] | None:
    """(batch file, index) of a list path ``BATCH#INDEX``, or None when it is not one."""
    batch_file, sep, index = path.rpartition("#")
    if not sep or not batch_file or not index.isdigit():
        return None
    return batch_file, int(index)


def train_batch_files(folder: Path) -> list[Path]:
    """The folder's ``data_batch_N`` files in the order of N."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_file() and (m := TRAIN_FILE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def _split_entries(files: list[Path]) -> tuple[list[VideoEntry], dict[str, int]]:
    entries: list[VideoEntry] = []
    per_file: dict[str, int] = {}
    for path in files:
        _, labels = read_batch(path)
        entries += [VideoEntry(image_path(path.name, i), int(v), 1) for i, v in enumerate(labels)]
        per_file[path.name] = len(labels)
    return entries, per_file


INDEX_FILES = ("train.lst", "val.lst", "classes.txt", "manifest.json")


def index_cifar(folder: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Writes the index of a ``cifar-10-batches-py`` folder to ``out_dir`` and returns its summary.

    out_dir/train.lst: every image of the data_batch_N files (in N order, then row order);
    out_dir/val.lst: those of test_batch; lines ``data_batch_1#17 1 6`` (see the module);
    out_dir/classes.txt: batches.meta's label names, line i for label i;
    out_dir/manifest.json: the counts in the form the scan of a video set writes (kind "image", no failures).
    The summary: ``classes`` (names), and for ``train`` and ``val``: ``images``, ``files`` (images per
    batch file) and ``per_class`` (images per class name, in label order); ``lists`` (the paths written).
    Every file is read in full, so a damaged one fails here (a ClipflowError naming it), as does a
    missing folder, one without data_batch files, test_batch or batches.meta. The files are recorded as
    clipflow's (:mod:`clipflow.made`); one of their names in ``out_dir`` that clipflow did not write is refused
    before any batch is read.
    """
    folder, out_dir = Path(folder), check_output_dir(out_dir, "--out-dir")
    made = Made(out_dir, "--out-dir")
    made.check(INDEX_FILES)
    if not folder.is_dir():
        raise ClipflowError(
            f"CIFAR-10 folder {folder} does not exist; give the extracted cifar-10-batches-py folder of "
            "https://www.cs.toronto.edu/~kriz/cifar.html (the python version)"
        )
    train_files = train_batch_files(folder)
    if not train_files:
        raise ClipflowError(
            f"CIFAR-10 folder {folder} has no data_batch_N files; give the extracted cifar-10-batches-py "
            "folder (data_batch_1..5, test_batch, batches.meta)"
        )
    names = read_label_names(folder / META_FILE)
    summary: dict[str, Any] = {"folder": str(folder), "classes": names}
    lists: dict[str, str] = {}
    for split, files in (("train", train_files), ("val", [folder / TEST_FILE])):
        entries, per_file = _split_entries(files)
        if not entries:
            raise ClipflowError(f"CIFAR-10 folder {folder}: the {split} batch files ({', '.join(per_file)}) are empty")
        counts = np.bincount([e.label for e in entries], minlength=NUM_CLASSES)
        summary[split] = {
            "images": len(entries),
            "files": per_file,
            "per_class": {name: int(c) for name, c in zip(names, counts, strict=True)},
        }
        lists[split] = str(out_dir / f"{split}.lst")
        made.write_text(f"{split}.lst", list_text(entries))
    lists["classes"] = str(out_dir / "classes.txt")
    made.write_text("classes.txt", "".join(f"{n}\n" for n in names))
    summary["lists"] = lists
    splits = {split: {**summary[split], "failed": 0} for split in ("train", "val")}  # a damaged file stops here
    manifest = {"kind": "image", "folder": str(folder), "classes": names, "splits": splits, "failures": []}
    made.write_text("manifest.json", json.dumps(manifest, indent=2) + "\n")  # as data scan's
    return summary
