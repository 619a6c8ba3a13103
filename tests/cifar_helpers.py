"""Shared by the CIFAR tests: the synthetic set's size, what each recipe's script does to the images
(RECIPE_SPECS, also checked against the recipes in tests/test_recipes.py), and readers of a test folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clipflow.data.cifar.batches import read_batch
from clipflow.data.cifar.dataset import CifarImages
from clipflow.data.cifar.transforms import ImageSpec

NUM_TRAIN, NUM_VAL = 60, 20
RAW = (1 / 255, 1 / 255, 1 / 255)  # std that leaves 0..255 pixels as they are
# What each script does to the images, as ImageSpecs (sources in clipflow.data.cifar.transforms' docstring); the
# recipes must say the same (tests/test_recipes.py).
RECIPE_SPECS: dict[str, ImageSpec] = {
    # example/distributed_training/cifar10_dist.py: x / 255, nothing else
    "cifar10_dist": ImageSpec(),
    # example/gluon/image_classification.py --dataset cifar10 (example/gluon/data.py get_cifar10_iterator)
    "gluon_image_classification": ImageSpec(random_flip=True, std=RAW),
    # example/image-classification/train_cifar10.py (+ common/data.py), the "Training MXNet part 4" run;
    # without its random hue / saturation / lightness shifts
    "train_cifar10": ImageSpec(
        crop_size=28,
        padding=4,
        pad_value=127,
        random_flip=True,
        mean=(123.68 / 255, 116.779 / 255, 103.939 / 255),
        std=RAW,
    ),
    # gluon-cv scripts/classification/cifar/train_cifar10.py
    "gluoncv_train_cifar10": ImageSpec(
        padding=4, random_flip=True, mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)
    ),
}

PADDED = RECIPE_SPECS["train_cifar10"]  # crop 28 of the image padded by 4 with 127, flips
GLUONCV = RECIPE_SPECS["gluoncv_train_cifar10"]  # crop 32 of the image padded by 4 with 0, flips


def random_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n)


def images_of(root: Path, split: str, spec: ImageSpec | None = None, mode: str | None = None, seed: int = 0):
    """The split's CifarImages of a folder made as the small_cifar fixture makes it (batches/, lists/)."""
    return CifarImages(root / "lists" / f"{split}.lst", root / "batches", mode or split, seed, spec)


def stored_images(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split's images and labels in list order, straight from the files."""
    if split == "val":
        return read_batch(folder / "test_batch")
    parts = [read_batch(folder / f"data_batch_{n}") for n in range(1, 6)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def copy_folder(source: Path, target: Path) -> Path:
    target.mkdir()
    for p in source.iterdir():
        (target / p.name).write_bytes(p.read_bytes())
    return target
