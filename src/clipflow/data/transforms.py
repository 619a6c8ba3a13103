"""Spatial transforms of decoded clips, as GluonCV's video transforms do them.

Clips are float tensors (C, T, H, W) in [0, 1]. Training takes a multi-scale crop
(each side a scale ratio of the short side), resizes it to the input size, and may
flip; validation takes a centre crop of the input size. Then per-channel
normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F


@dataclass(frozen=True)
class TransformSpec:
    input_size: int = 224
    scale_ratios: tuple[float, ...] = (1.0, 0.875, 0.75, 0.66)
    max_distort: int = 1
    random_flip: bool = True
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)


def to_float_clip(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, C) uint8 -> (C, T, H, W) float in [0, 1]."""
    return torch.from_numpy(frames).permute(3, 0, 1, 2).float().div_(255.0)


def _resize(clip: torch.Tensor, height: int, width: int) -> torch.Tensor:
    if clip.shape[-2:] == (height, width):
        return clip
    return F.interpolate(clip, size=(height, width), mode="bilinear", align_corners=False)


def train_crop_box(height: int, width: int, spec: TransformSpec, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(top, left, crop_h, crop_w): crop sides from scale ratios of the short side, at most max_distort apart."""
    base = min(height, width)
    sizes = [int(base * r) for r in spec.scale_ratios]
    pairs = [(h, w) for i, h in enumerate(sizes) for j, w in enumerate(sizes) if abs(i - j) <= spec.max_distort]
    crop_h, crop_w = pairs[int(rng.integers(len(pairs)))]
    top = int(rng.integers(height - crop_h + 1))
    left = int(rng.integers(width - crop_w + 1))
    return top, left, crop_h, crop_w


def center_crop_box(height: int, width: int, size: int) -> tuple[int, int, int, int]:
    size_h, size_w = min(size, height), min(size, width)
    return (height - size_h) // 2, (width - size_w) // 2, size_h, size_w


def apply(clip: torch.Tensor, box: tuple[int, int, int, int], flip: bool, spec: TransformSpec) -> torch.Tensor:
    """Crops `box` out of (C, T, H, W), resizes to the input size, flips, normalises."""
    top, left, h, w = box
    out = _resize(clip[:, :, top : top + h, left : left + w], spec.input_size, spec.input_size)
    if flip:
        out = out.flip(-1)
    mean = torch.tensor(spec.mean).view(3, 1, 1, 1)
    std = torch.tensor(spec.std).view(3, 1, 1, 1)
    return (out - mean) / std
