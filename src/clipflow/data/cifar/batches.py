"""CIFAR-10's python batch files: the format's constants, a safe reader and a writer.

The files. CIFAR-10's python version (https://www.cs.toronto.edu/~kriz/cifar.html,
``cifar-10-python.tar.gz``, which unpacks to ``cifar-10-batches-py/``) holds the
pickled dicts ``data_batch_1`` .. ``data_batch_5`` (the 50,000 training images,
10,000 per file) and ``test_batch`` (the 10,000 test images), each with ``b'data'``,
an N x 3072 uint8 array whose row is one 32x32 image stored channel by channel
(1,024 red values, then green, then blue, each plane row by row), and ``b'labels'``,
N integers in 0..9; and ``batches.meta`` with ``b'label_names'``, the 10 class names
in label order. The page's reader is ``pickle.load(f, encoding='bytes')`` (the files
were written by Python 2, so the keys come back as bytes). :func:`read_batch` reads a
batch with an unpickler that only builds the objects such a file holds (numpy arrays
and plain Python values), so a file that is not one fails with a ClipflowError
naming it instead of running whatever a pickle asks for.

Image layout: :func:`read_batch` returns images (N, 3, 32, 32) uint8, channel-first,
a view of the file's rows without a copy (the rows are channel-planar already); the
dataset's items are (3, H, W) uint8 tensors in the same layout, which is the
model's (N, C, H, W) once batched.
"""

from __future__ import annotations

import importlib
import pickle
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clipflow.errors import ClipflowError
from clipflow.files import write_bytes_atomic
from clipflow.made import Made

SIDE = 32  # CIFAR images are 32x32
PIXELS = 3 * SIDE * SIDE  # 3,072 values a row
NUM_CLASSES = 10
# batches.meta of the real set (https://www.cs.toronto.edu/~kriz/cifar.html), label 0 first
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
META_FILE = "batches.meta"
TEST_FILE = "test_batch"
TRAIN_FILE = re.compile(r"data_batch_(\d+)")
IMAGES_PER_BATCH = 10000  # the real set's num_cases_per_batch

# What a CIFAR-10 python batch pickle may build: numpy arrays (as numpy 1 and 2 pickle them, every
# protocol), numpy scalars, and bytes as Python 3 pickles them under protocol 2. numpy.core is numpy 2's
# numpy._core under its old name (the real files were written by numpy 1).
_ALLOWED_GLOBALS = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    """An unpickler that builds only what a CIFAR batch holds; any other global is an error."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core") :]
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"it holds a {module}.{name} object, which no CIFAR-10 batch has")
        return getattr(importlib.import_module(module), name)


def _load_pickle(path: Path, what: str) -> dict[str, Any]:
    """The dict pickled in ``path`` (bytes keys decoded), or a ClipflowError naming the file."""
    if not path.is_file():
        raise ClipflowError(
            f"CIFAR-10 {what} {path} does not exist; expected the extracted cifar-10-batches-py folder of "
            "https://www.cs.toronto.edu/~kriz/cifar.html (data_batch_1..5, test_batch, batches.meta)"
        )
    try:
        with path.open("rb") as f:
            obj = _BatchUnpickler(f, encoding="bytes").load()
    except Exception as exc:  # a damaged or foreign file fails in many ways; each is the same user error
        reason = str(exc) or type(exc).__name__
        raise ClipflowError(
            f"CIFAR-10 {what} {path} is not a CIFAR-10 python pickle (truncated or another format: {reason}); "
            "extract cifar-10-python.tar.gz again"
        ) from None
    if not isinstance(obj, dict):
        raise ClipflowError(f"CIFAR-10 {what} {path} holds a {type(obj).__name__}, not the dict of a CIFAR-10 batch")
    return {k.decode("latin-1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _require_key(batch: dict[str, Any], key: str, path: Path, what: str) -> Any:
    if key not in batch:
        keys = ", ".join(sorted(batch)) or "none"
        raise ClipflowError(f"CIFAR-10 {what} {path} has no b'{key}' entry (its keys: {keys})")
    return batch[key]


def read_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of one CIFAR-10 python batch file (``data_batch_N`` or ``test_batch``).

    images: (N, 3, 32, 32) uint8, channel-first RGB, a view of the file's ``b'data'`` rows (the
    format's channel-planar 3,072 values: red plane, green, blue; cifar.html). labels: (N,) int64 in
    0..9. Fails with a ClipflowError naming the file when it is missing, not a pickle or truncated,
    lacks ``b'data'`` or ``b'labels'``, has data that is not N x 3072 uint8, or labels that are not N
    integers in 0..9.
    """
    path = Path(path)
    batch = _load_pickle(path, "batch file")
    data = _require_key(batch, "data", path, "batch file")
    labels = _require_key(batch, "labels", path, "batch file")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != PIXELS:
        shape = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ClipflowError(f"CIFAR-10 batch file {path}: b'data' must be an N x {PIXELS} uint8 array, got {shape}")
    try:
        label_array = np.asarray(labels)
    except (TypeError, ValueError):  # ragged nested lists
        label_array = np.asarray([], dtype=object)
    if label_array.ndim != 1 or (label_array.size and label_array.dtype.kind not in "iu"):
        raise ClipflowError(f"CIFAR-10 batch file {path}: b'labels' must be a list of integers")
    if len(label_array) != len(data):
        raise ClipflowError(
            f"CIFAR-10 batch file {path}: {len(label_array)} labels for {len(data)} images; the file is damaged"
        )
    label_array = label_array.astype(np.int64)
    bad = np.flatnonzero((label_array < 0) | (label_array >= NUM_CLASSES))
    if bad.size:
        raise ClipflowError(
            f"CIFAR-10 batch file {path}: image {int(bad[0])} has label {int(label_array[bad[0]])}, "
            f"outside 0..{NUM_CLASSES - 1}"
        )
    return data.reshape(len(data), 3, SIDE, SIDE), label_array


def read_label_names(path: str | Path) -> list[str]:
    """The 10 class names of ``batches.meta`` (its ``b'label_names'``), label 0 first; a ClipflowError
    naming the file when it is missing, not a pickle, or lacks 10 names."""
    path = Path(path)
    meta = _load_pickle(path, "meta file")
    names = _require_key(meta, "label_names", path, "meta file")
    if not isinstance(names, list | tuple) or not all(isinstance(n, bytes | str) for n in names):
        raise ClipflowError(f"CIFAR-10 meta file {path}: b'label_names' must be a list of names")
    if len(names) != NUM_CLASSES:
        raise ClipflowError(f"CIFAR-10 meta file {path}: {len(names)} label names, CIFAR-10 has {NUM_CLASSES}")
    return [n.decode("utf-8") if isinstance(n, bytes) else n for n in names]


def _dump_atomic(path: Path, obj: dict[bytes, Any], made: Made | None = None) -> None:
    """``obj`` pickled to ``path`` atomically; through ``made`` (recorded as clipflow's) when given."""
    data = pickle.dumps(obj, protocol=4)
    if made is not None:
        made.write_bytes(path.name, data)
    else:
        write_bytes_atomic(path, data)


def write_batch(
    path: str | Path,
    images: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    batch_label: str = "",
    first: int = 0,
    made: Made | None = None,
) -> None:
    """Writes one batch file in CIFAR-10's python format, atomically.

    images: (N, 3, 32, 32) uint8, as read_batch returns them. The dict has bytes keys, as the real
    files load: ``b'batch_label'``, ``b'labels'`` (a list of ints), ``b'data'`` (N x 3072 uint8) and
    ``b'filenames'`` (``image_{first + i:05d}.png``, standing in for the real set's source names).
    """
    images = np.asarray(images)
    labels = [int(v) for v in labels]
    if images.dtype != np.uint8 or images.shape[1:] != (3, SIDE, SIDE):
        raise ValueError(f"images must be (N, 3, {SIDE}, {SIDE}) uint8, got {images.dtype} {images.shape}")
    if len(labels) != len(images) or any(not 0 <= v < NUM_CLASSES for v in labels):
        raise ValueError(f"labels must be {len(images)} integers in 0..{NUM_CLASSES - 1}")
    batch = {
        b"batch_label": batch_label.encode(),
        b"labels": labels,
        b"data": np.ascontiguousarray(images).reshape(len(images), PIXELS),
        b"filenames": [f"image_{first + i:05d}.png".encode() for i in range(len(images))],
    }
    _dump_atomic(Path(path), batch, made)


def write_meta(path: str | Path, label_names: Sequence[str] = CIFAR10_CLASSES, made: Made | None = None) -> None:
    """Writes ``batches.meta``: ``b'label_names'`` (bytes), ``b'num_cases_per_batch'``, ``b'num_vis'`` (3072)."""
    meta = {
        b"num_cases_per_batch": IMAGES_PER_BATCH,
        b"label_names": [n.encode() for n in label_names],
        b"num_vis": PIXELS,
    }
    _dump_atomic(Path(path), meta, made)


def write_batches(
    folder: str | Path,
    train_images: np.ndarray,
    train_labels: Sequence[int] | np.ndarray,
    val_images: np.ndarray,
    val_labels: Sequence[int] | np.ndarray,
    label_names: Sequence[str] = CIFAR10_CLASSES,
    train_batches: int = 5,
    made: Made | None = None,
) -> list[Path]:
    """Writes a ``cifar-10-batches-py`` folder: ``batches.meta``, the training images split in order into
    ``train_batches`` files ``data_batch_1``.. (fewer when there are fewer images, none empty), and
    ``test_batch``. Images are (N, 3, 32, 32) uint8. Returns the files written. With ``made`` (the record of
    ``folder``), each is written through it, recorded as clipflow's."""
    folder = Path(folder)
    if len(label_names) != NUM_CLASSES:
        raise ValueError(f"CIFAR-10 has {NUM_CLASSES} label names, got {len(label_names)}")
    if train_batches < 1:
        raise ValueError(f"train_batches must be >= 1, got {train_batches}")
    written = [folder / META_FILE]
    write_meta(written[0], label_names, made)
    train_labels = np.asarray(train_labels)
    parts = np.array_split(np.arange(len(train_images)), batch_count(len(train_images), train_batches))
    for number, part in enumerate(parts, start=1):
        path = folder / f"data_batch_{number}"
        batch_label = f"training batch {number} of {len(parts)}"
        first = int(part[0]) if len(part) else 0
        write_batch(path, np.asarray(train_images)[part], train_labels[part], batch_label, first, made)
        written.append(path)
    write_batch(folder / TEST_FILE, np.asarray(val_images), val_labels, "testing batch 1 of 1", made=made)
    written.append(folder / TEST_FILE)
    return written


def batch_count(num_train: int, train_batches: int) -> int:
    """How many data_batch files :func:`write_batches` writes: ``train_batches``, fewer when there are fewer
    images (none empty)."""
    return min(train_batches, max(num_train, 1))


def batch_names(num_train: int, train_batches: int) -> list[str]:
    """The names of the files :func:`write_batches` writes into its folder."""
    return [META_FILE, *(f"data_batch_{n}" for n in range(1, batch_count(num_train, train_batches) + 1)), TEST_FILE]
