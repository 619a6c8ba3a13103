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

Each name has a card (clipflow.models.cards): the input it was published with (frames per pathway, or none for an image
model, and the side), which ``python -m clipflow models info`` runs through the model on the meta
device (shapes only, no memory and no arithmetic) to print the output shape.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from clipflow.errors import ClipflowError
from clipflow.models.cards import card
from clipflow.models.cifar import CIFAR_MODELS
from clipflow.models.i3d import i3d_resnet50_v1
from clipflow.models.slowfast import SlowFast
from clipflow.models.slowfast_spec import SLOWFAST_KEYS, SLOWFAST_PRESETS, slowfast_settings, spec_of
from clipflow.values import is_int


class OnePathway(nn.Module):
    """A one-input video classifier called as ``(slow, fast)``: it reads the fast pathway's frames."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        return self.net(fast)


def build_model(settings: dict[str, Any]) -> nn.Module:
    """`settings` is a recipe's model section: `name`, `num_classes` and the architecture's own keys (``classes``, the
    class names, are the data's: no setting of the architecture)."""
    name = settings.get("name")
    card(name)
    classes = settings.get("num_classes")
    if not is_int(classes) or classes < 1:
        raise ClipflowError(f"model.num_classes must be an integer >= 1, got {classes!r}")
    if name == "slowfast" or name in SLOWFAST_PRESETS:
        return SlowFast(spec_of(slowfast_settings(settings)))
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
    unknown = sorted(set(settings) - {"name", "num_classes", "classes"})
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
