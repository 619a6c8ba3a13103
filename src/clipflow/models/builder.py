"""Builds a model from a recipe's `model:` section; the one place that maps names to classes.

Three kinds of model:

- SlowFast (ours, clipflow.models.slowfast), by its published names or as ``slowfast``
  with every setting given; called ``model(slow, fast)``;
- one-clip video classifiers, also called ``model(slow, fast)`` by the trainer and the evaluation,
  which read only the fast pathway's frames (a recipe sets them with ``fast_temporal_stride``; the
  slow ones are not read): torchvision's r3d_18, mc3_18, r2plus1d_18, s3d, mvit_v2_s, swin3d_t
  (built without weights), and ``i3d_resnet50_v1`` (ours, clipflow.models.i3d: GluonCV's
  i3d_resnet50_v1_kinetics400);
- image classifiers (ours, clipflow.models.cifar: the CIFAR-10 networks of the MXNet documents),
  ``resnet18_v1``, ``vgg11`` and ``cifar_resnext110``. `build_model` returns them as plain modules
  called ``model(images)`` with one (N, 3, H, W) batch; ``is_image_model(name)`` tells them apart.
  Their cards have no frames (``frames == ()``).

Every name but ``slowfast`` and its presets takes only ``name`` and ``num_classes``.

Each name has a card: the input it was published with (frames per pathway, or none for an image
model, and the side), which ``python -m clipflow models info`` runs through the model on the meta
device (shapes only, no memory and no arithmetic) to print the output shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from clipflow.errors import ClipflowError
from clipflow.models.cifar import CIFAR_MODELS
from clipflow.models.i3d import i3d_resnet50_v1
from clipflow.models.slowfast import RESNET_DEPTHS, SlowFast, SlowFastSpec
from clipflow.values import is_int

# Published SlowFast variants, as PySlowFast's configs (configs/Kinetics/SLOWFAST_4x16_R50, SLOWFAST_8x8_R50,
# c2/SLOWFAST_8x8_R101_101_101) and GluonCV's model definitions give them: alpha is the ratio of fast to
# slow frames (32 to 4 for 4x16, 32 to 8 for 8x8), the lateral kernel covers 5 or 7 fast frames.
SLOWFAST_PRESETS = {
    "slowfast_4x16_resnet50": {"alpha": 8, "fusion_kernel": 5, "depth": 50},
    "slowfast_8x8_resnet50": {"alpha": 4, "fusion_kernel": 7, "depth": 50},
    "slowfast_8x8_resnet101": {"alpha": 4, "fusion_kernel": 5, "depth": 101},
}
SLOWFAST_KEYS = {"depth", "width", "beta_inv", "alpha", "fusion_kernel", "fusion_channel_ratio", "dropout", "stem_pool"}


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
TORCHVISION_VIDEO = tuple(name for name, c in CARDS.items() if c.source.startswith("torchvision"))


def is_image_model(name: str) -> bool:
    """Whether model ``name`` classifies images, called ``model(images)``, rather than clips; an unknown
    name is a ClipflowError."""
    return card(name).frames == ()


class OnePathway(nn.Module):
    """A one-input video classifier called as ``(slow, fast)``: it reads the fast pathway's frames."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        return self.net(fast)


def _slowfast_spec(settings: dict[str, Any]) -> SlowFastSpec:
    depth = settings.get("depth", 50)
    if isinstance(depth, int):
        if depth not in RESNET_DEPTHS:
            raise ClipflowError(f"model.depth {depth} is not one of {sorted(RESNET_DEPTHS)} (or give 4 block counts)")
        depths = RESNET_DEPTHS[depth]
    else:
        depths = tuple(int(d) for d in depth)
        if len(depths) != 4 or min(depths) < 1:
            raise ClipflowError(f"model.depth {list(depth)} must be 4 positive block counts, one per stage")
    return SlowFastSpec(
        num_classes=int(settings["num_classes"]),
        depths=depths,  # type: ignore[arg-type]
        width=int(settings.get("width", 64)),
        beta_inv=int(settings.get("beta_inv", 8)),
        alpha=int(settings.get("alpha", 8)),
        fusion_kernel=int(settings.get("fusion_kernel", 7)),
        fusion_channel_ratio=int(settings.get("fusion_channel_ratio", 2)),
        dropout=float(settings.get("dropout", 0.5)),
        stem_pool=bool(settings.get("stem_pool", True)),
    )


def card(name: Any) -> ModelCard:
    if name not in CARDS:
        raise ClipflowError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    return CARDS[name]


def _slowfast_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A SlowFast model section with its preset (if it names one) filled in under the given keys."""
    return {**SLOWFAST_PRESETS.get(settings["name"], {}), **{k: v for k, v in settings.items() if k != "name"}}


def slowfast_alpha(settings: dict[str, Any]) -> int | None:
    """The fast-to-slow frame ratio a model section builds, or None for a model that is not a SlowFast."""
    if settings.get("name") != "slowfast" and settings.get("name") not in SLOWFAST_PRESETS:
        return None
    return int(_slowfast_settings(settings).get("alpha", SlowFastSpec.alpha))


def build_model(settings: dict[str, Any]) -> nn.Module:
    """`settings` is a recipe's model section: `name`, `num_classes` and the architecture's own keys."""
    name = settings.get("name")
    card(name)
    classes = settings.get("num_classes")
    if not is_int(classes) or classes < 1:
        raise ClipflowError(f"model.num_classes must be an integer >= 1, got {classes!r}")
    if name == "slowfast" or name in SLOWFAST_PRESETS:
        return SlowFast(_slowfast_spec(_slowfast_settings(settings)))
    _only_name_and_classes(name, settings)
    if name in CIFAR_MODELS:
        return CIFAR_MODELS[name](classes)
    if name == "i3d_resnet50_v1":
        return OnePathway(i3d_resnet50_v1(classes))
    import torchvision.models

    return OnePathway(torchvision.models.get_model(name, weights=None, num_classes=classes))


def _only_name_and_classes(name: str, settings: dict[str, Any]) -> None:
    foreign = sorted(set(settings) & SLOWFAST_KEYS)
    if foreign:
        raise ClipflowError(f"model.{foreign[0]} is a SlowFast setting; {name} takes only name and num_classes")
    unknown = sorted(set(settings) - {"name", "num_classes"})
    if unknown:
        raise ClipflowError(f"model.{unknown[0]} is not a setting of {name}; it takes only name and num_classes")


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(total, trainable) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def model_info(name: str, num_classes: int) -> dict[str, Any]:
    """Parameter counts and the input and output shapes of model ``name`` at its published input,
    worked out on the meta device (no weights are allocated, nothing is computed)."""
    found = card(name)
    with torch.device("meta"):
        model = build_model({"name": name, "num_classes": num_classes}).eval()
        with torch.no_grad():
            if not found.frames:
                inputs = [torch.empty(1, 3, found.size, found.size)]
                output = model(inputs[0])
            else:
                inputs = [torch.empty(1, 3, t, found.size, found.size) for t in found.frames]
                slow, fast = (inputs[0], inputs[1]) if len(inputs) == 2 else (inputs[0], inputs[0])
                output = model(slow, fast)
    total, trainable = count_parameters(model)
    return {
        "name": name,
        "num_classes": num_classes,
        "parameters": total,
        "trainable": trainable,
        "inputs": [list(x.shape) for x in inputs],
        "output": list(output.shape),
        "source": found.source,
    }
