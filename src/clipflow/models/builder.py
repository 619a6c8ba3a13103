"""Builds a model from a recipe's `model:` section; the one place that maps names to classes."""

from __future__ import annotations

from typing import Any

from torch import nn

from clipflow.errors import ClipflowError
from clipflow.models.slowfast import RESNET_DEPTHS, SlowFast, SlowFastSpec

# Published SlowFast variants: (alpha, lateral kernel, ResNet depth), as in PySlowFast and GluonCV.
SLOWFAST_PRESETS = {
    "slowfast_4x16_resnet50": {"alpha": 4, "fusion_kernel": 5, "depth": 50},
    "slowfast_8x8_resnet50": {"alpha": 8, "fusion_kernel": 7, "depth": 50},
    "slowfast_8x8_resnet101": {"alpha": 8, "fusion_kernel": 7, "depth": 101},
}
MODEL_NAMES = ("slowfast", *SLOWFAST_PRESETS)


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


def build_model(settings: dict[str, Any]) -> nn.Module:
    """`settings` is a recipe's model section: `name`, `num_classes` and the architecture's own keys."""
    name = settings.get("name")
    if name not in MODEL_NAMES:
        raise ClipflowError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    merged = {**SLOWFAST_PRESETS.get(name, {}), **{k: v for k, v in settings.items() if k != "name"}}
    return SlowFast(_slowfast_spec(merged))


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(total, trainable) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)
