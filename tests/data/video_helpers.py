"""Videos whose frames show their own number, and the GluonCV reference of which frames a clip takes: shared by
the sampling, reader and transform tests.

counter_frames draws frame t's number as 8 black or white vertical bars (one bit each) on 128 x 64 frames;
read_counters reads them back from decoded frames; numbered_set writes such videos and their list. gluoncv_reference
is GluonCV's VideoClsCustom loop, written here from its source (not from clipflow's code)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clipflow.data.listfile import VideoEntry, write_list
from clipflow.data.sampling import ClipSpec
from clipflow.data.synthetic import write_video

WIDTH, HEIGHT, BITS = 128, 64, 8


def counter_frames(count: int) -> np.ndarray:
    frames = np.zeros((count, HEIGHT, WIDTH, 3), dtype=np.uint8)
    bar = WIDTH // BITS
    for t in range(count):
        for b in range(BITS):
            if t >> b & 1:
                frames[t, :, b * bar : (b + 1) * bar] = 255
    return frames


def read_counters(frames: np.ndarray) -> list[int]:
    """The frame number each decoded (T, H, W, C) frame shows."""
    bar = WIDTH // BITS
    centres = frames[:, HEIGHT // 4 : 3 * HEIGHT // 4, :, :].mean(axis=(1, 3))  # (T, W)
    bits = [centres[:, b * bar + bar // 4 : (b + 1) * bar - bar // 4].mean(axis=1) > 127 for b in range(BITS)]
    return [sum(int(bits[b][t]) << b for b in range(BITS)) for t in range(len(frames))]


def numbered_set(root: Path, lengths: dict[str, int], frames_of) -> Path:
    """Videos ``name`` of ``count`` frames ``frames_of(count)`` (keyframe every 16) and their list ``all.lst``."""
    for name, count in lengths.items():
        write_video(root / name, frames_of(count), fps=30, keyframe_interval=16)
    write_list(root / "all.lst", [VideoEntry(n, i, c) for i, (n, c) in enumerate(lengths.items())])
    return root


def gluoncv_reference(num_frames: int, spec: ClipSpec, mode: str, rng: np.random.Generator | None) -> list[list[int]]:
    """Per segment, fast then slow 0-based frames, as VideoClsCustom's decord SlowFast loader reads them
    (``rng`` is drawn from in training only)."""
    skip = spec.new_length * spec.new_step
    if mode == "train":
        average = (num_frames - skip + 1) // spec.num_segments
        if average > 0:
            offsets = [k * average + int(r) for k, r in enumerate(rng.integers(average, size=spec.num_segments))]
        elif num_frames > max(spec.num_segments, skip):
            offsets = sorted(int(r) for r in rng.integers(num_frames - skip + 1, size=spec.num_segments))
        else:
            offsets = [0] * spec.num_segments
    else:
        enough = num_frames > (spec.num_segments + skip - 1 if mode == "val" else skip - 1)
        tick = (num_frames - skip + 1) / float(spec.num_segments)
        offsets = [int(tick / 2.0 + tick * x) for x in range(spec.num_segments)] if enough else [0] * spec.num_segments
    jitter = (
        rng.integers(spec.new_step, size=skip // spec.new_step) if spec.temporal_jitter and mode == "train" else None
    )
    segments = []
    for start in offsets:
        offset, fast, slow = start + 1, [], []
        for i in range(len(range(0, skip, spec.new_step))):
            late = 0 if jitter is None else int(jitter[i])
            frame_id = offset + late - 1 if offset + late <= num_frames else offset - 1
            if (i + 1) % spec.fast_temporal_stride == 0:
                fast.append(frame_id)
                if (i + 1) % spec.slow_temporal_stride == 0:
                    slow.append(frame_id)
            if offset + spec.new_step < num_frames:
                offset += spec.new_step
        segments.append(fast + slow)
    return segments
