"""CIFAR-10 for the MXNet CIFAR-10 recipes: the python batch files, index lists, and a torch Dataset.

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

Index lists: the project's list-file format (clipflow.data.listfile, GluonCV's
``path num_frames label``), an image being ``BATCH#INDEX 1 LABEL``: image INDEX
(0-based row) of batch file BATCH (relative to the ``cifar-10-batches-py`` folder,
or absolute), one frame. For example ``data_batch_1#17 1 6``. read_list and
write_list take these lines as they are: ``#`` starts a comment only at the start of
a line, and a path without spaces is the first field.

The recipes and what each does to the images (recipes/*_cifar10.yaml carry them as data settings):

- MXNet "Distributed Training using Gluon", ``example/distributed_training/cifar10_dist.py``
  (apache/mxnet): gluon's CIFAR10 dataset with
  ``transform(data, label) = transpose(data.astype(float32), (2, 0, 1)) / 255``: the
  whole 32x32 image, no augmentation, no mean or std. This is :class:`ImageSpec`'s
  default.
- MXNet "Distributed Training in MXNet", ``example/gluon/image_classification.py
  --dataset cifar10``, whose data comes from ``example/gluon/data.py``
  ``get_cifar10_iterator``: ``mx.io.ImageRecordIter`` with ``data_shape (3, 32, 32)``,
  ``rand_crop=True``, ``rand_mirror=True`` for training (both False for validation),
  its ``mean_img`` commented out and no scale: a random 32x32 crop of the record
  file's images (CIFAR's 32x32, so the whole image; the .rec files were not checked
  here), a horizontal flip with probability 1/2, and raw 0..255 pixels (in this
  module's 0..1 units: mean 0, std 1/255).
- "Training MXNet part 4" (blog) runs MXNet's ``example/image-classification/train_cifar10.py``:
  ``image_shape 3,28,28``, ``pad_size 4``, ``set_data_aug_level(parser, 2)``
  (``random_crop 1``, ``random_mirror 1``, ``max_random_h 36``, ``max_random_s 50``,
  ``max_random_l 50``), ``common/data.py``'s ``rgb_mean 123.68,116.779,103.939``
  and ``fill_value 127``, no std: in training the 32x32 image is padded by 4 pixels
  of value 127 on each side and a random 28x28 crop taken (ImageRecordIter's
  augmenter, ``src/io/image_aug_default.cc``: pad, then crop with top and left
  uniform over every position that fits, inclusive), then flipped with probability
  1/2; validation has no pad and the centre 28x28 crop (top and left
  ``(32 - 28) // 2``). The random hue, saturation and lightness shifts of level 2 are
  not reproduced here (the spec has no colour jitter).
- GluonCV's ``scripts/classification/cifar/train_cifar10.py`` (the GluonCV CIFAR-10
  tutorial): ``RandomCrop(32, pad=4)`` (zero padding), ``RandomFlipLeftRight``,
  ``Normalize([0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010])``; the test images
  unaugmented.

The training rule (:meth:`CifarImages.plan`): a generator
``np.random.default_rng([seed, epoch, index])`` draws, in this order, ``top`` and
``left`` uniform in ``0 .. 32 + 2 * padding - crop_size`` (inclusive) and, when
``random_flip``, the flip as ``rng.integers(2) == 1``; the image is padded with
``pad_value`` on all four sides, the ``crop_size`` square at (top, left) cut, then
mirrored left-right if flipped. Validation: no padding, the centre
``crop_size`` square at ``(32 - crop_size) // 2``, no flip (the whole image at the
default crop of 32).
"""

from __future__ import annotations

import importlib
import json
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.data.transforms import check_mean_std
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.values import is_int

SIDE = 32  # CIFAR images are 32x32
PIXELS = 3 * SIDE * SIDE  # 3,072 values a row
NUM_CLASSES = 10
# batches.meta of the real set (https://www.cs.toronto.edu/~kriz/cifar.html), label 0 first
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
META_FILE = "batches.meta"
TEST_FILE = "test_batch"
TRAIN_FILE = re.compile(r"data_batch_(\d+)")
IMAGES_PER_BATCH = 10000  # the real set's num_cases_per_batch
MODES = ("train", "val", "test")  # "test" is "val": the test batch is CIFAR-10's validation set


# -- reading and writing the batch files ---------------------------------------------------------------

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


def _dump_atomic(path: Path, obj: dict[bytes, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump(obj, f, protocol=4)
    tmp.replace(path)


def write_batch(
    path: str | Path, images: np.ndarray, labels: Sequence[int] | np.ndarray, batch_label: str = "", first: int = 0
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
    _dump_atomic(Path(path), batch)


def write_meta(path: str | Path, label_names: Sequence[str] = CIFAR10_CLASSES) -> None:
    """Writes ``batches.meta``: ``b'label_names'`` (bytes), ``b'num_cases_per_batch'``, ``b'num_vis'`` (3072)."""
    meta = {
        b"num_cases_per_batch": IMAGES_PER_BATCH,
        b"label_names": [n.encode() for n in label_names],
        b"num_vis": PIXELS,
    }
    _dump_atomic(Path(path), meta)


def write_batches(
    folder: str | Path,
    train_images: np.ndarray,
    train_labels: Sequence[int] | np.ndarray,
    val_images: np.ndarray,
    val_labels: Sequence[int] | np.ndarray,
    label_names: Sequence[str] = CIFAR10_CLASSES,
    train_batches: int = 5,
) -> list[Path]:
    """Writes a ``cifar-10-batches-py`` folder: ``batches.meta``, the training images split in order into
    ``train_batches`` files ``data_batch_1``.. (fewer when there are fewer images, none empty), and
    ``test_batch``. Images are (N, 3, 32, 32) uint8. Returns the files written."""
    folder = Path(folder)
    if len(label_names) != NUM_CLASSES:
        raise ValueError(f"CIFAR-10 has {NUM_CLASSES} label names, got {len(label_names)}")
    if train_batches < 1:
        raise ValueError(f"train_batches must be >= 1, got {train_batches}")
    written = [folder / META_FILE]
    write_meta(written[0], label_names)
    train_labels = np.asarray(train_labels)
    parts = np.array_split(np.arange(len(train_images)), min(train_batches, max(len(train_images), 1)))
    for number, part in enumerate(parts, start=1):
        path = folder / f"data_batch_{number}"
        batch_label = f"training batch {number} of {len(parts)}"
        first = int(part[0]) if len(part) else 0
        write_batch(path, np.asarray(train_images)[part], train_labels[part], batch_label, first)
        written.append(path)
    write_batch(folder / TEST_FILE, np.asarray(val_images), val_labels, "testing batch 1 of 1")
    written.append(folder / TEST_FILE)
    return written


# -- the synthetic set ----------------------------------------------------------------------------------

# one colour a class, far apart (R, G, B)
SYNTHETIC_COLOURS = np.array(
    [
        [230, 25, 75],
        [60, 180, 75],
        [255, 225, 25],
        [0, 130, 200],
        [245, 130, 48],
        [145, 30, 180],
        [70, 240, 240],
        [240, 50, 230],
        [150, 90, 20],
        [255, 255, 255],
    ],
    dtype=np.float32,
)


def synthetic_images(labels: np.ndarray, rng: np.random.Generator, noise: float = 12.0) -> np.ndarray:
    """(N, 3, 32, 32) uint8 images of the given labels.

    Image of class c: a grey background (level uniform in 40..150) and a striped square (side 12..20,
    anywhere it fits) in class c's colour (:data:`SYNTHETIC_COLOURS`), its stripes 2 pixels wide,
    horizontal for even c, vertical for odd c, alternating with 60% of the colour; then Gaussian noise
    of ``noise`` levels. The colour alone tells the class, the stripes' direction says it again;
    flips and crops keep both, so a small convolutional network learns the set in a few epochs.
    """
    n = len(labels)
    rows, cols = np.indices((SIDE, SIDE))
    out = np.empty((n, 3, SIDE, SIDE), dtype=np.float32)
    backgrounds = rng.uniform(40, 150, n)
    sides = rng.integers(12, 21, n)
    for k, label in enumerate(labels):
        side = int(sides[k])
        top, left = rng.integers(0, SIDE - side + 1, 2)
        phase = int(rng.integers(4))
        across = rows if label % 2 == 0 else cols  # horizontal stripes change along the rows
        stripe = ((across + phase) // 2) % 2 == 0
        inside = np.zeros((SIDE, SIDE), dtype=bool)
        inside[top : top + side, left : left + side] = True
        colour = SYNTHETIC_COLOURS[label][:, None, None]
        square = np.where(stripe, colour, 0.6 * colour)
        out[k] = np.where(inside, square, backgrounds[k])
    out += rng.normal(0.0, noise, out.shape).astype(np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def balanced_labels(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` labels, each class ``n // 10`` or one more times (every class once ``n >= 10``), shuffled."""
    return rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.int64)


def make_synthetic_cifar(
    folder: str | Path, num_train: int = 500, num_val: int = 100, seed: int = 0, train_batches: int = 5
) -> list[Path]:
    """Writes a small CIFAR-10-format set to ``folder`` (a stand-in for ``cifar-10-batches-py``), the same
    bytes for the same arguments: ``num_train`` images in ``train_batches`` data_batch files, ``num_val``
    in test_batch, classes balanced and named as CIFAR-10's. The images: :func:`synthetic_images`.
    Returns the files written."""
    for name, value in (("num_train", num_train), ("num_val", num_val)):
        if not is_int(value) or value < 1:
            raise ClipflowError(f"synthetic CIFAR-10: {name} must be an integer >= 1, got {value!r}")
    rng = np.random.default_rng(seed)
    train_labels = balanced_labels(num_train, rng)
    val_labels = balanced_labels(num_val, rng)
    train = synthetic_images(train_labels, rng)
    val = synthetic_images(val_labels, rng)
    return write_batches(folder, train, train_labels, val, val_labels, CIFAR10_CLASSES, train_batches)


# -- index lists ---------------------------------------------------------------------------------------


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


def index_cifar(folder: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Writes the index of a ``cifar-10-batches-py`` folder to ``out_dir`` and returns its summary.

    out_dir/train.lst: every image of the data_batch_N files (in N order, then row order);
    out_dir/val.lst: those of test_batch; lines ``data_batch_1#17 1 6`` (see the module);
    out_dir/classes.txt: batches.meta's label names, line i for label i;
    out_dir/manifest.json: the counts in the form the scan of a video set writes (kind "image", no failures).
    The summary: ``classes`` (names), and for ``train`` and ``val``: ``images``, ``files`` (images per
    batch file) and ``per_class`` (images per class name, in label order); ``lists`` (the paths written).
    Every file is read in full, so a damaged one fails here (a ClipflowError naming it), as does a
    missing folder, one without data_batch files, test_batch or batches.meta.
    """
    folder, out_dir = Path(folder), Path(out_dir)
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
        write_list(lists[split], entries)
    lists["classes"] = str(out_dir / "classes.txt")
    write_text_atomic(lists["classes"], "".join(f"{n}\n" for n in names))
    summary["lists"] = lists
    splits = {split: {**summary[split], "failed": 0} for split in ("train", "val")}  # a damaged file stops here
    manifest = {"kind": "image", "folder": str(folder), "classes": names, "splits": splits, "failures": []}
    write_text_atomic(out_dir / "manifest.json", json.dumps(manifest, indent=2) + "\n")  # as data scan's
    return summary


# -- transforms ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageSpec:
    """How images are cut, flipped and normalised. Defaults: MXNet's ``cifar10_dist.py`` (the whole image,
    no augmentation, x / 255); the other recipes' settings are described in the module.

    crop_size: side of the square the model sees (1..32). padding: pixels of ``pad_value`` added on each
    side before a training crop. random_flip: mirror left-right with probability 1/2 in training.
    mean, std: per channel (R, G, B) in 0..1 units, as ``(x / 255 - mean) / std``.
    """

    crop_size: int = SIDE
    padding: int = 0
    pad_value: int = 0
    random_flip: bool = False
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @classmethod
    def of(cls, data: dict) -> ImageSpec:
        """From a recipe's data section (kind image; the crop is its ``input_size``)."""
        return cls(data["input_size"], data["padding"], data["pad_value"], data["random_flip"], tuple(data["mean"]),
                   tuple(data["std"]))  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            value = getattr(self, name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, name, tuple(value))
        if not is_int(self.crop_size) or not 1 <= self.crop_size <= SIDE:
            raise ClipflowError(f"data.input_size must be an integer in 1..{SIDE} for images, got {self.crop_size!r}")
        if not is_int(self.padding) or self.padding < 0:
            raise ClipflowError(f"data.padding must be an integer >= 0, got {self.padding!r}")
        if not is_int(self.pad_value) or not 0 <= self.pad_value <= 255:
            raise ClipflowError(f"data.pad_value must be an integer in 0..255, got {self.pad_value!r}")
        if not isinstance(self.random_flip, bool):
            raise ClipflowError(f"data.random_flip must be true or false, got {self.random_flip!r}")
        check_mean_std(self.mean, self.std)


@dataclass(frozen=True)
class ImageView:
    """Where an item's image is cut: ``padding`` pixels added on each side, the square at (top, left) of
    the padded image, and whether it is mirrored left-right."""

    padding: int
    top: int
    left: int
    flip: bool


def train_view(spec: ImageSpec, rng: np.random.Generator) -> ImageView:
    """A training view drawn from ``rng``: top, then left (uniform over every position that fits), then
    the flip when ``spec.random_flip``."""
    slack = SIDE + 2 * spec.padding - spec.crop_size
    top = int(rng.integers(slack + 1))
    left = int(rng.integers(slack + 1))
    flip = spec.random_flip and bool(rng.integers(2))
    return ImageView(spec.padding, top, left, flip)


def val_view(spec: ImageSpec) -> ImageView:
    """The validation view: no padding, the centre square at ``(32 - crop_size) // 2`` (ImageRecordIter's
    rule without rand_crop), no flip."""
    offset = (SIDE - spec.crop_size) // 2
    return ImageView(0, offset, offset, False)


def apply_view(image: np.ndarray, view: ImageView, spec: ImageSpec) -> np.ndarray:
    """The (3, crop, crop) uint8 square of a (3, 32, 32) image for ``view``, contiguous."""
    if view.padding:
        p = view.padding
        image = np.pad(image, ((0, 0), (p, p), (p, p)), mode="constant", constant_values=spec.pad_value)
    size = spec.crop_size
    out = image[:, view.top : view.top + size, view.left : view.left + size]
    if view.flip:
        out = out[:, :, ::-1]
    return np.ascontiguousarray(out)


def normalize_images(images: torch.Tensor, spec: ImageSpec) -> torch.Tensor:
    """uint8 images (..., 3, H, W) as the model's contiguous float32 input ``(x / 255 - mean) / std``,
    computed as ``(x - 255 mean) / (255 std)`` on the images' device (as normalize_clips does)."""
    out = images.to(torch.float32, memory_format=torch.contiguous_format)
    mean = torch.tensor([255.0 * m for m in spec.mean], dtype=torch.float32, device=out.device).view(3, 1, 1)
    std = torch.tensor([255.0 * s for s in spec.std], dtype=torch.float32, device=out.device).view(3, 1, 1)
    return out.sub_(mean).div_(std)


# -- the dataset ---------------------------------------------------------------------------------------


class CifarImages(Dataset):
    """Item i: (image, label), image a (3, crop, crop) uint8 tensor, of an index list (index_cifar).

    ``root`` is the cifar-10-batches-py folder the list's batch files are relative to. Mode "train"
    draws each item's crop and flip from (seed, epoch, index) (the rule in the module docstring), so an
    item is the same image in any process or loader worker; "val" (and "test", the same) is the
    unaugmented centre view. The interface is SlowFastClips's: ``epoch``, ``set_epoch``, ``transform``
    (the spec), ``normalize`` (a uint8 batch as the model's float input).

    Batch files are read when an item first needs them and kept for the process's life (a full
    training batch file is 30 MiB; each loader worker reads its own copy unless forked from a process
    that already had it). Pickling the dataset (spawned workers) leaves them out.
    """

    def __init__(
        self,
        list_path: str | Path,
        root: str | Path,
        mode: str = "train",
        seed: int = 0,
        spec: ImageSpec | None = None,
    ):
        if mode not in MODES:
            raise ClipflowError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.list_path, self.root = Path(list_path), Path(root)
        self.mode = "val" if mode == "test" else mode
        self.seed = seed
        self.transform = spec if spec is not None else ImageSpec()
        self.epoch = 0
        entries = read_list(self.list_path, NUM_CLASSES)
        files: dict[Path, int] = {}
        file_ids, indices = [], []
        for e in entries:
            where = f"{self.list_path} line {e.line}"
            parsed = parse_image_path(e.path)
            if parsed is None:
                raise ClipflowError(
                    f"{where}: {e.path!r} is not a CIFAR image; expected BATCH_FILE#INDEX such as data_batch_1#17 "
                    "(make the list with clipflow.data.cifar.index_cifar)"
                )
            if e.num_frames not in (None, 1):
                raise ClipflowError(f"{where}: frame count {e.num_frames}; an image has 1 frame")
            path = VideoEntry(parsed[0], e.label).resolve(self.root)
            if path not in files:
                if not path.is_file():
                    raise ClipflowError(
                        f"{where}: batch file {path} does not exist; check the CIFAR-10 folder ({self.root}) "
                        "or index it again"
                    )
                files[path] = len(files)
            file_ids.append(files[path])
            indices.append(parsed[1])
        self.files = list(files)
        self._file_ids = np.array(file_ids, dtype=np.int32)
        self._indices = np.array(indices, dtype=np.int64)
        self._labels = np.array([e.label for e in entries], dtype=np.int64)
        self._lines = np.array([e.line for e in entries], dtype=np.int64)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}  # a worker reads the batch files it needs itself
        return state

    def __len__(self) -> int:
        return len(self._labels)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def views(self) -> int:
        """Images per item: 1 in every mode."""
        return 1

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """A uint8 batch (N, 3, H, W) of this dataset's images as the model's float input (spec's mean, std)."""
        return normalize_images(images, self.transform)

    def plan(self, index: int) -> ImageView:
        """Where item ``index`` is cut in this epoch, without reading it."""
        index = range(len(self))[index]
        if self.mode != "train":
            return val_view(self.transform)
        return train_view(self.transform, np.random.default_rng([self.seed, self.epoch, index]))

    def _batch(self, file_id: int, line: int) -> tuple[np.ndarray, np.ndarray]:
        if file_id not in self._cache:
            try:
                self._cache[file_id] = read_batch(self.files[file_id])
            except ClipflowError as exc:
                raise ClipflowError(f"{exc} (listed in {self.list_path} line {line})") from None
        return self._cache[file_id]

    def image(self, index: int) -> np.ndarray:
        """Item ``index``'s whole (3, 32, 32) uint8 image as stored, checked against its list line."""
        index = range(len(self))[index]
        file_id, row, line = int(self._file_ids[index]), int(self._indices[index]), int(self._lines[index])
        images, labels = self._batch(file_id, line)
        path = self.files[file_id]
        if row >= len(images):
            raise ClipflowError(
                f"{self.list_path} line {line}: {path} has {len(images)} images, no image {row}; "
                "the list does not match the batch files, index them again"
            )
        if labels[row] != self._labels[index]:
            raise ClipflowError(
                f"{self.list_path} line {line}: label {int(self._labels[index])}, but image {row} of {path} has "
                f"label {int(labels[row])}; the list does not match the batch files, index them again"
            )
        return images[row]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        index = range(len(self))[index]
        image = apply_view(self.image(index), self.plan(index), self.transform)
        return torch.from_numpy(image), int(self._labels[index])
