"""The pixel work on a decoded clip: crop, resize, flip, then normalise where the model runs (the boxes and settings
are clipflow.data.transforms').

Pixels: the decoder's (T, H, W, C) uint8 frames are viewed, without a copy, as (T, C, H, W) in channels-last
memory, which torch's uint8 bilinear kernel reads directly. Per clip: the crop (a view), the resize on uint8
(``torch.nn.functional.interpolate``, bilinear, half-pixel centres, no antialias, as GluonCV's ``cv2.resize``
INTER_LINEAR; a crop is at most the short side, so the downscale is mild: 256 to 224 by default), the flip on
uint8. These are the kernels torchvision.transforms.v2's ``crop``, ``resize`` and ``horizontal_flip`` call on
such a tensor, called without torchvision: its import (1.2 s of CPU, torch._dynamo through torchvision.ops) in
every worker bought nothing (the clips are equal, tests/data/test_transforms.py). The loader hands these uint8
clips on, a quarter of the bytes of float ones; ``normalize_clips`` turns a batch into the model's float input
where the model runs (one pass: float32, contiguous (N, C, T, H, W), then normalize with 255 x mean and 255 x
std, which is ``normalize(to_dtype(x, scale=True), mean, std)`` to within 1e-6). Measured on SlowFast 4x16
clips, normalising in the loader cost 5 ms a clip there and 4 times the shared memory between loader workers and
the trainer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn.functional import interpolate

from clipflow.data.transforms import Box, TransformSpec


def as_video(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """The decoder's (T, H, W, C) uint8 frames as (T, C, H, W): a view, no copy."""
    tensor = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
    return tensor.permute(0, 3, 1, 2)


def transform_clip(
    video: torch.Tensor, box: Box, flip: bool, spec: TransformSpec, pick: Sequence[int] | None = None
) -> torch.Tensor:
    """Crops ``box`` out of a (T, C, H, W) uint8 video, resizes it to the input size, flips.

    ``pick``: the frames of ``video`` to use, in order (taken after the crop, so only the crop is copied).
    Returns uint8 (C, T, input_size, input_size), the layout the model takes, as a view of (T, H, W, C)
    memory: the resize writes that order, and transposing it here would cost 3 ms a SlowFast clip.
    normalize_clips makes the model's float input of it, on the model's device.
    """
    size = spec.input_size
    top, left, height, width = box
    clip = video[..., top : top + height, left : left + width]  # every box lies inside the frame
    if pick is not None:
        clip = clip[list(pick)]
    if tuple(clip.shape[-2:]) != (size, size):
        clip = interpolate(clip, size=[size, size], mode="bilinear", align_corners=False, antialias=False)
    else:
        clip = clip.contiguous(memory_format=torch.channels_last)  # a crop is a view of the decoded frames
    if flip:
        clip = clip.flip(-1)
    return clip.permute(1, 0, 2, 3)


def normalize_clips(clips: torch.Tensor, spec: TransformSpec) -> torch.Tensor:
    """uint8 clips (..., C, T, H, W), any memory order, as the model's contiguous float32 input:
    ``normalize(to_dtype(x, scale=True), mean, std)`` to within 1e-6.

    One pass converts and lays the memory out as the model takes it; the 1 / 255 is folded into the
    mean and std. Run it where the model is (after moving the uint8 batch: a quarter of the bytes).
    """
    out = clips.to(torch.float32, memory_format=torch.contiguous_format)
    shape = (3, 1, 1, 1)
    mean = torch.tensor(_scaled(spec.mean), dtype=torch.float32, device=out.device).view(shape)
    std = torch.tensor(_scaled(spec.std), dtype=torch.float32, device=out.device).view(shape)
    return out.sub_(mean).div_(std)


def _scaled(values: tuple[float, ...]) -> list[float]:
    return [255.0 * v for v in values]
