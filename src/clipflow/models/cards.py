"""Each model name's card: the input it was published with and where it comes from, read without torch (the
recipe checks, the launchers); clipflow.models.builder builds the model a name stands for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clipflow.errors import ClipflowError


@dataclass(frozen=True)
class ModelCard:
    """The input a model was published with: frames per pathway (slow, fast; or the one clip) at ``size``
    x ``size``, and where the model comes from. An image model has no frames: its input is (N, 3, size, size)."""

    frames: tuple[int, ...]
    size: int
    source: str


CARDS = {
    "slowfast": ModelCard((4, 32), 224, "clipflow (settings from the recipe)"),
    "slowfast_4x16_resnet50": ModelCard((4, 32), 224, "PySlowFast, GluonCV"),
    "slowfast_8x8_resnet50": ModelCard((8, 32), 224, "PySlowFast, GluonCV"),
    "slowfast_8x8_resnet101": ModelCard((8, 32), 224, "PySlowFast, GluonCV"),
    "r3d_18": ModelCard((16,), 112, "torchvision"),
    "mc3_18": ModelCard((16,), 112, "torchvision"),
    "r2plus1d_18": ModelCard((16,), 112, "torchvision"),
    "s3d": ModelCard((16,), 224, "torchvision"),
    "mvit_v2_s": ModelCard((16,), 224, "torchvision (its input size is fixed: 16 x 224 x 224)"),
    "swin3d_t": ModelCard((16,), 224, "torchvision"),
    # GluonCV's training log of i3d_resnet50_v1_kinetics400: new_length=32, input_size=224.
    "i3d_resnet50_v1": ModelCard((32,), 224, "GluonCV"),
    # CIFAR-10 at its own 32 x 32 in cifar10_dist.py and in image_classification.py (data shape (3, 32, 32));
    # train_cifar10.py crops 28 x 28 (image_shape '3,28,28') for the 110-layer "resnext".
    "resnet18_v1": ModelCard((), 32, "MXNet Gluon model zoo (Distributed Training using Gluon: CIFAR-10)"),
    "vgg11": ModelCard((), 32, "MXNet Gluon model zoo (image_classification.py --dataset cifar10)"),
    "cifar_resnext110": ModelCard((), 28, "MXNet example symbols/resnext.py (train_cifar10.py, 28 x 28 crops)"),
}
MODEL_NAMES = tuple(CARDS)


def is_image_model(name: str) -> bool:
    """Whether model ``name`` classifies images, called ``model(images)``, rather than clips; an unknown
    name is a ClipflowError."""
    return card(name).frames == ()


def card(name: Any) -> ModelCard:
    if name not in CARDS:
        raise ClipflowError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    return CARDS[name]
