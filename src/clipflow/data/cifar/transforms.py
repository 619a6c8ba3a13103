"""How CIFAR images are cut, flipped and normalised: ImageSpec (a recipe's image settings), the
training view drawn from (seed, epoch, index), the validation view, and normalisation.

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

The training rule (:func:`train_view`, as ``CifarImages.plan`` of clipflow.data.cifar.dataset
calls it): a generator ``np.random.default_rng([seed, epoch, index])`` draws, in this order,
``top`` and ``left`` uniform in ``0 .. 32 + 2 * padding - crop_size`` (inclusive) and, when
``random_flip``, the flip as ``rng.integers(2) == 1``; the image is padded with
``pad_value`` on all four sides, the ``crop_size`` square at (top, left) cut, then
mirrored left-right if flipped. Validation: no padding, the centre
``crop_size`` square at ``(32 - crop_size) // 2``, no flip (the whole image at the
default crop of 32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from clipflow.data.cifar.batches import SIDE
from clipflow.data.transforms import check_mean_std
from clipflow.errors import ClipflowError
from clipflow.values import is_int


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
    def from_recipe(cls, recipe: dict) -> ImageSpec:
        """From a validated recipe (its data section, kind image; the crop is its ``input_size``)."""
        data = recipe["data"]
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
