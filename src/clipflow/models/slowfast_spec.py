"""A SlowFast network's settings, from a recipe's model section, without torch: the published presets, the
checks of each setting, and the fast-to-slow frame ratio the recipe checks read (clipflow.models.slowfast builds
the network from a :class:`SlowFastSpec`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clipflow.errors import ClipflowError

# Published SlowFast variants, as PySlowFast's configs (configs/Kinetics/SLOWFAST_4x16_R50, SLOWFAST_8x8_R50,
# c2/SLOWFAST_8x8_R101_101_101) and GluonCV's model definitions give them: alpha is the ratio of fast to
# slow frames (32 to 4 for 4x16, 32 to 8 for 8x8), the lateral kernel covers 5 or 7 fast frames.
SLOWFAST_PRESETS = {
    "slowfast_4x16_resnet50": {"alpha": 8, "fusion_kernel": 5, "depth": 50},
    "slowfast_8x8_resnet50": {"alpha": 4, "fusion_kernel": 7, "depth": 50},
    "slowfast_8x8_resnet101": {"alpha": 4, "fusion_kernel": 5, "depth": 101},
}
SLOWFAST_KEYS = {"depth", "width", "beta_inv", "alpha", "fusion_kernel", "fusion_channel_ratio", "dropout", "stem_pool"}

# Temporal kernel sizes of the first conv of each bottleneck, per stage (res2..res5).
SLOW_TEMPORAL_KERNELS = (1, 1, 3, 3)
FAST_TEMPORAL_KERNELS = (3, 3, 3, 3)
RESNET_DEPTHS = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


@dataclass(frozen=True)
class SlowFastSpec:
    """Settings of a SlowFast network.

    width: channels of the slow stem (64 for the ResNet variants); the stages
    double it, and bottlenecks expand by 4. beta_inv: the fast pathway has
    1/beta_inv of the slow pathway's channels. alpha: frame-rate ratio between
    the pathways, the stride of the lateral connections.
    """

    num_classes: int = 400
    depths: tuple[int, int, int, int] = RESNET_DEPTHS[50]
    width: int = 64
    beta_inv: int = 8
    alpha: int = 8
    fusion_kernel: int = 7
    fusion_channel_ratio: int = 2
    dropout: float = 0.5
    stem_pool: bool = True
    spatial_strides: tuple[int, int, int, int] = (1, 2, 2, 2)
    slow_temporal_kernels: tuple[int, ...] = field(default=SLOW_TEMPORAL_KERNELS)
    fast_temporal_kernels: tuple[int, ...] = field(default=FAST_TEMPORAL_KERNELS)


def spec_of(settings: dict[str, Any]) -> SlowFastSpec:
    """The spec of a SlowFast model section (its preset filled in): ``depth`` 18/50/101 or four block counts,
    every other setting as given or the spec's default."""
    default = SlowFastSpec()
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
        width=int(settings.get("width", default.width)),
        beta_inv=int(settings.get("beta_inv", default.beta_inv)),
        alpha=int(settings.get("alpha", default.alpha)),
        fusion_kernel=int(settings.get("fusion_kernel", default.fusion_kernel)),
        fusion_channel_ratio=int(settings.get("fusion_channel_ratio", default.fusion_channel_ratio)),
        dropout=float(settings.get("dropout", default.dropout)),
        stem_pool=bool(settings.get("stem_pool", default.stem_pool)),
    )


def slowfast_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A SlowFast model section with its preset (if it names one) filled in under the given keys."""
    return {**SLOWFAST_PRESETS.get(settings["name"], {}), **{k: v for k, v in settings.items() if k != "name"}}


def slowfast_alpha(settings: dict[str, Any]) -> int | None:
    """The fast-to-slow frame ratio a model section builds, or None for a model that is not a SlowFast."""
    if settings.get("name") != "slowfast" and settings.get("name") not in SLOWFAST_PRESETS:
        return None
    return int(slowfast_settings(settings).get("alpha", SlowFastSpec.alpha))
