"""Which frames a clip reads, following GluonCV's VideoClsCustom.

A clip spans `new_length` frames taken every `new_step` frames (its skip length is
their product). Training draws one random offset per TSN segment; validation takes
the centre of each segment. Frames past the end of a short video repeat its last
reachable frame. For SlowFast, every `fast_temporal_stride`-th frame of the span
feeds the fast pathway and every `slow_temporal_stride`-th the slow one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClipSpec:
    new_length: int = 32
    new_step: int = 1
    num_segments: int = 1
    fast_temporal_stride: int = 2
    slow_temporal_stride: int = 8

    @property
    def skip_length(self) -> int:
        return self.new_length * self.new_step


def train_offsets(num_frames: int, spec: ClipSpec, rng: np.random.Generator) -> np.ndarray:
    """1-based start frame of each segment, random inside its chunk."""
    segments, skip = spec.num_segments, spec.skip_length
    average = (num_frames - skip + 1) // segments
    if average > 0:
        offsets = np.arange(segments) * average + rng.integers(average, size=segments)
    elif num_frames > max(segments, skip):
        offsets = np.sort(rng.integers(num_frames - skip + 1, size=segments))
    else:
        offsets = np.zeros(segments, dtype=np.int64)
    return offsets + 1


def val_offsets(num_frames: int, spec: ClipSpec) -> np.ndarray:
    """1-based start frame of each segment, at the centre of its chunk."""
    segments, skip = spec.num_segments, spec.skip_length
    if num_frames > segments + skip - 1:
        tick = (num_frames - skip + 1) / float(segments)
        offsets = np.array([int(tick / 2.0 + tick * x) for x in range(segments)])
    else:
        offsets = np.zeros(segments, dtype=np.int64)
    return offsets + 1


def span_indices(offset: int, num_frames: int, spec: ClipSpec) -> list[int]:
    """0-based frame indices of the `new_length` frames of one clip starting at 1-based `offset`."""
    ids = []
    for _ in range(spec.new_length):
        ids.append(offset - 1)
        if offset + spec.new_step < num_frames:
            offset += spec.new_step
    return ids


def slowfast_indices(offsets: np.ndarray, num_frames: int, spec: ClipSpec) -> tuple[list[int], list[int]]:
    """(fast, slow) 0-based frame indices over all segments, in GluonCV's order."""
    fast, slow = [], []
    for offset in offsets:
        span = span_indices(int(offset), num_frames, spec)
        fast += [f for i, f in enumerate(span) if (i + 1) % spec.fast_temporal_stride == 0]
        slow += [f for i, f in enumerate(span) if (i + 1) % spec.slow_temporal_stride == 0]
    return fast, slow
