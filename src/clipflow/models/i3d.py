"""I3D ResNet-50 v1 (Carreira and Zisserman, 2017, on a ResNet-50) as GluonCV's ``i3d_resnet50_v1_kinetics400``.

The layout is GluonCV's gluoncv/model_zoo/action_recognition/i3d_resnet.py (itself after open-mmlab's
ResNet3d), written again in plain torch:

- stem: a 5x7x7 convolution, stride 2 in time and space, 64 channels; BatchNorm, ReLU; a 1x3x3 max pool
  with stride 2 in time and space;
- four stages of 3, 4, 6, 3 bottlenecks (ResNet-50 v1b: the spatial stride sits on the 3x3 convolution,
  the projection shortcut opens each stage); in an inflated block the first convolution is 3x1x1, in
  the others 1x1x1; which blocks are inflated is ``INFLATE_R50``;
- a 2x1x1 max pool (stride 2 in time) after the first stage;
- global average pool over time and space, dropout 0.5, one linear layer.

Its published input is 32 frames at 224 x 224 (GluonCV's training log: ``new_length=32``, ``new_step=2``,
``input_size=224``); the time axis shrinks 8 times (stem, stem pool, pool after stage 1), so 32 frames
reach the head as 4.
"""

from __future__ import annotations

import torch
from torch import nn

# Per stage, 1 where a block's first convolution is inflated to 3x1x1 (GluonCV's inflate_freq).
INFLATE_R50 = ((1, 1, 1), (1, 0, 1, 0), (1, 0, 1, 0, 1, 0), (0, 1, 0))
EXPANSION = 4


def _bn(channels: int) -> nn.BatchNorm3d:
    # Gluon's BatchNorm: epsilon 1e-5, momentum 0.9 of the running mean (torch counts the other way: 0.1).
    return nn.BatchNorm3d(channels, eps=1e-5, momentum=0.1)


class InflatedBottleneck(nn.Module):
    """(3 or 1)x1x1 -> 1x3x3 (spatial stride) -> 1x1x1, with a 1x1x1 projection shortcut when asked."""

    def __init__(self, dim_in: int, planes: int, stride: int, inflate: bool, project: bool):
        super().__init__()
        t = 3 if inflate else 1
        self.conv1 = nn.Conv3d(dim_in, planes, (t, 1, 1), padding=(t // 2, 0, 0), bias=False)
        self.bn1 = _bn(planes)
        self.conv2 = nn.Conv3d(planes, planes, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False)
        self.bn2 = _bn(planes)
        self.conv3 = nn.Conv3d(planes, planes * EXPANSION, 1, bias=False)
        self.bn3 = _bn(planes * EXPANSION)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module | None = None
        if project:
            self.shortcut = nn.Sequential(
                nn.Conv3d(dim_in, planes * EXPANSION, 1, stride=(1, stride, stride), bias=False),
                _bn(planes * EXPANSION),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(out + skip)


class I3DResNet(nn.Module):
    """Input: one clip (N, 3, T, H, W), T at least 5 (32 as published); output (N, num_classes)."""

    def __init__(self, num_classes: int, inflate: tuple[tuple[int, ...], ...] = INFLATE_R50, dropout: float = 0.5):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 64, (5, 7, 7), stride=(2, 2, 2), padding=(2, 3, 3), bias=False),
            _bn(64),
            nn.ReLU(inplace=True),
            nn.MaxPool3d((1, 3, 3), stride=(2, 2, 2), padding=(0, 1, 1)),
        )
        stages = []
        dim_in = 64
        for i, pattern in enumerate(inflate):
            planes = 64 * 2**i
            stride = 1 if i == 0 else 2
            blocks = [
                InflatedBottleneck(
                    dim_in if b == 0 else planes * EXPANSION,
                    planes,
                    stride if b == 0 else 1,
                    bool(flag),
                    project=b == 0,
                )
                for b, flag in enumerate(pattern)
            ]
            stages.append(nn.Sequential(*blocks))
            dim_in = planes * EXPANSION
        self.stages = nn.ModuleList(stages)
        self.pool2 = nn.MaxPool3d((2, 1, 1), stride=(2, 1, 1))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(dim_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        nn.init.normal_(self.fc.weight, std=0.01)  # GluonCV's init_std
        nn.init.zeros_(self.fc.bias)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        x = self.stem(clip)
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i == 0:
                x = self.pool2(x)
        return self.fc(self.dropout(x.mean(dim=(2, 3, 4))))


def i3d_resnet50_v1(num_classes: int) -> I3DResNet:
    return I3DResNet(num_classes, INFLATE_R50, dropout=0.5)
