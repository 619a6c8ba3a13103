"""SlowFast networks (Feichtenhofer et al., 2019) in plain torch.

One builder makes every variant: the published ResNet-50/101 models and the tiny
model of the embedded default differ only in their settings (`SlowFastSpec`).
The layout follows PySlowFast: a stem per pathway, four residual stages of
bottleneck blocks, a lateral Conv3d from the fast to the slow pathway after the
stem and after each of the first three stages, and a head that pools each
pathway, concatenates and classifies.
"""

from __future__ import annotations

import torch
from torch import nn

from clipflow.models.slowfast_spec import SlowFastSpec


def _bn(channels: int, zero_init: bool = False) -> nn.BatchNorm3d:
    bn = nn.BatchNorm3d(channels, eps=1e-5, momentum=0.1)
    if zero_init:
        nn.init.zeros_(bn.weight)
    return bn


class Bottleneck(nn.Module):
    """Tx1x1 -> 1x3x3 (spatial stride) -> 1x1x1, with a projection shortcut when needed.

    The last BatchNorm starts at zero so each block begins as the identity.
    """

    def __init__(self, dim_in: int, dim_inner: int, dim_out: int, temporal_kernel: int, stride: int):
        super().__init__()
        self.a = nn.Conv3d(dim_in, dim_inner, (temporal_kernel, 1, 1), padding=(temporal_kernel // 2, 0, 0), bias=False)
        self.a_bn = _bn(dim_inner)
        self.b = nn.Conv3d(dim_inner, dim_inner, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False)
        self.b_bn = _bn(dim_inner)
        self.c = nn.Conv3d(dim_inner, dim_out, 1, bias=False)
        self.c_bn = _bn(dim_out, zero_init=True)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module | None = None
        if dim_in != dim_out or stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv3d(dim_in, dim_out, 1, stride=(1, stride, stride), bias=False), _bn(dim_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.a_bn(self.a(x)))
        out = self.relu(self.b_bn(self.b(out)))
        out = self.c_bn(self.c(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(out + skip)


class Stem(nn.Module):
    def __init__(self, dim_out: int, temporal_kernel: int, pool: bool):
        super().__init__()
        self.conv = nn.Conv3d(
            3, dim_out, (temporal_kernel, 7, 7), stride=(1, 2, 2), padding=(temporal_kernel // 2, 3, 3), bias=False
        )
        self.bn = _bn(dim_out)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)) if pool else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x))))


class FuseFastToSlow(nn.Module):
    """Lateral connection: a time-strided Conv3d of the fast features, concatenated to the slow ones."""

    def __init__(self, fast_channels: int, ratio: int, kernel: int, alpha: int):
        super().__init__()
        self.conv = nn.Conv3d(
            fast_channels,
            fast_channels * ratio,
            (kernel, 1, 1),
            stride=(alpha, 1, 1),
            padding=(kernel // 2, 0, 0),
            bias=False,
        )
        self.bn = _bn(fast_channels * ratio)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lateral = self.relu(self.bn(self.conv(fast)))
        return torch.cat([slow, lateral], dim=1), fast


def _stage(dim_in: int, dim_out: int, depth: int, temporal_kernel: int, stride: int) -> nn.Sequential:
    blocks = [
        Bottleneck(dim_in if i == 0 else dim_out, dim_out // 4, dim_out, temporal_kernel, stride if i == 0 else 1)
        for i in range(depth)
    ]
    return nn.Sequential(*blocks)


class SlowFast(nn.Module):
    """Input: (slow, fast) clips of shape (N, 3, T, H, W), fast with alpha times the frames."""

    def __init__(self, spec: SlowFastSpec):
        super().__init__()
        self.spec = spec
        slow_w, fast_w = spec.width, spec.width // spec.beta_inv
        if fast_w < 1:
            raise ValueError(f"width {spec.width} / beta_inv {spec.beta_inv} leaves the fast pathway no channels")
        lateral_extra = fast_w * spec.fusion_channel_ratio
        self.slow_stem = Stem(slow_w, 1, spec.stem_pool)
        self.fast_stem = Stem(fast_w, 5, spec.stem_pool)
        self.fuse_stem = FuseFastToSlow(fast_w, spec.fusion_channel_ratio, spec.fusion_kernel, spec.alpha)

        slow_stages, fast_stages, fuses = [], [], []
        slow_in, fast_in = slow_w + lateral_extra, fast_w
        for i, depth in enumerate(spec.depths):
            slow_out = spec.width * 4 * 2**i
            fast_out = slow_out // spec.beta_inv
            stride = spec.spatial_strides[i]
            slow_stages.append(_stage(slow_in, slow_out, depth, spec.slow_temporal_kernels[i], stride))
            fast_stages.append(_stage(fast_in, fast_out, depth, spec.fast_temporal_kernels[i], stride))
            if i < 3:
                fuses.append(FuseFastToSlow(fast_out, spec.fusion_channel_ratio, spec.fusion_kernel, spec.alpha))
                slow_in, fast_in = slow_out + fast_out * spec.fusion_channel_ratio, fast_out
            else:
                slow_in, fast_in = slow_out, fast_out
        self.slow_stages = nn.ModuleList(slow_stages)
        self.fast_stages = nn.ModuleList(fast_stages)
        self.fuses = nn.ModuleList(fuses)
        self.dropout = nn.Dropout(spec.dropout) if spec.dropout > 0 else nn.Identity()
        self.head = nn.Linear(slow_in + fast_in, spec.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        slow, fast = self.fuse_stem(self.slow_stem(slow), self.fast_stem(fast))
        for i in range(4):
            slow, fast = self.slow_stages[i](slow), self.fast_stages[i](fast)
            if i < 3:
                slow, fast = self.fuses[i](slow, fast)
        pooled = torch.cat([slow.mean(dim=(2, 3, 4)), fast.mean(dim=(2, 3, 4))], dim=1)
        return self.head(self.dropout(pooled))
