"""A small CIFAR-10-format set that a tiny model learns in a few epochs: the stand-in for
``cifar-10-batches-py`` in tests and the workflow's synthetic runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clipflow.data.cifar.batches import CIFAR10_CLASSES, NUM_CLASSES, SIDE, batch_names, write_batches
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir
from clipflow.made import Made
from clipflow.values import is_int

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
    Returns the files written, recorded as clipflow's (:mod:`clipflow.made`): a file of one of their names in
    ``folder`` that clipflow did not write is refused before any image is made."""
    for name, value in (("num_train", num_train), ("num_val", num_val)):
        if not is_int(value) or value < 1:
            raise ClipflowError(f"synthetic CIFAR-10: {name} must be an integer >= 1, got {value!r}")
    made = Made(check_output_dir(folder, "--out-dir"), "--out-dir")
    made.check(batch_names(num_train, train_batches))
    rng = np.random.default_rng(seed)
    train_labels = balanced_labels(num_train, rng)
    val_labels = balanced_labels(num_val, rng)
    train = synthetic_images(train_labels, rng)
    val = synthetic_images(val_labels, rng)
    return write_batches(folder, train, train_labels, val, val_labels, CIFAR10_CLASSES, train_batches, made)
