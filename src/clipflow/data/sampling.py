"""Which frames a clip reads: GluonCV's VideoClsCustom rules, and PySlowFast's as an option.

GluonCV (the default). A clip spans ``new_length`` frames taken every ``new_step``
frames (its skip length is their product). A video is cut into ``num_segments``
chunks (TSN); training draws one random 1-based offset per chunk, validation and test
take each chunk's centre (test also for videos that validation treats as short).
Walking the span, the offset only advances while it stays before the last frame, so
a video shorter than the clip repeats its last reachable frame. With temporal jitter
each position reads up to ``new_step - 1`` frames later, unless that passes the end.
For SlowFast, every ``fast_temporal_stride``-th frame of the span feeds the fast
pathway and every ``slow_temporal_stride``-th the slow one; GluonCV stacks, per
segment, the fast frames and then the slow ones.

On videos that keep only the frames clips read. A clip reads every ``fast_temporal_stride x new_step``-th frame
(:attr:`ClipSpec.frame_step`, ``d``), so a re-encode that keeps frames 0, d, 2d, ... of the recipe's rate
(``data.reencode.match_recipe``) holds a clip in a ``1/d`` as many frames, decoded in a row. The sampler maps the
recipe onto such a video (:meth:`ClipSpec.on_every`): ``new_length // fast`` frames at step 1, all fast, every
``slow / fast``-th slow. A clip starting at kept frame ``s'`` reads original frames ``d s' + d j``: the recipe's
clip starting at ``d s' - (fast - 1) new_step``, frame for frame, fast and slow (but at the last start, where
GluonCV's walk repeats a frame). Its starts are the recipe's that fall on kept frames (one in ``d``), drawn
uniformly as the recipe's are; the centre clips of val and test move by less than ``d`` frames.

PySlowFast. The clip covers ``num_frames x sampling_rate`` frames at the target rate
(30 fps), scaled to the video's own rate; training starts it anywhere, testing starts
clip ``i`` of ``n`` at ``i / n`` of the slack. ``num_frames`` evenly spaced indices of
it (clamped into the video) are the fast pathway; the slow one takes
``num_frames / alpha`` of those, evenly spaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from clipflow.errors import ClipflowError

MODES = ("train", "val", "test")


@dataclass(frozen=True)
class ClipSpec:
    new_length: int = 32
    new_step: int = 1
    num_segments: int = 1
    fast_temporal_stride: int = 2
    slow_temporal_stride: int = 8
    temporal_jitter: bool = False

    def __post_init__(self) -> None:
        for name in ("new_length", "new_step", "num_segments", "fast_temporal_stride", "slow_temporal_stride"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClipflowError(f"clip sampling: {name} must be an integer >= 1, got {value!r}")
        if self.slow_temporal_stride % self.fast_temporal_stride:
            raise ClipflowError(
                f"clip sampling: slow_temporal_stride ({self.slow_temporal_stride}) must be a multiple of "
                f"fast_temporal_stride ({self.fast_temporal_stride}): every slow frame is also a fast one"
            )

    @classmethod
    def from_recipe(cls, recipe: dict) -> ClipSpec:
        """The recipe's temporal sampling (its ``data`` keys of the same names)."""
        return cls(**{f.name: recipe["data"][f.name] for f in fields(cls)})

    @property
    def skip_length(self) -> int:
        return self.new_length * self.new_step

    @property
    def frame_step(self) -> int:
        """How far apart the frames a clip reads lie: ``fast_temporal_stride x new_step`` (1 with temporal jitter,
        which may read any frame). A video that keeps every such frame and drops the others holds every clip."""
        return 1 if self.temporal_jitter else self.fast_temporal_stride * self.new_step

    def on_every(self, step: int) -> ClipSpec:
        """This clip on a video that keeps frames 0, step, 2 step, ... of the recipe's rate, ``step`` 1 or
        :attr:`frame_step`: ``new_length // fast_temporal_stride`` frames in a row, every one fast, every
        ``slow / fast``-th slow. Each clip it draws is one of this spec's, the same frames (see the module)."""
        if step == 1:
            return self
        if step != self.frame_step:
            jitter = " with temporal jitter" if self.temporal_jitter else ""
            raise ClipflowError(
                f"clip sampling: the videos keep one frame in {step} of the rate the recipe is written for, but its "
                f"clips read one in {self.frame_step}{jitter} (fast_temporal_stride {self.fast_temporal_stride} x "
                f"new_step {self.new_step}): re-encode them for this recipe (data.reencode.match_recipe) or without it"
            )
        fast = self.fast_temporal_stride
        return ClipSpec(self.new_length // fast, 1, self.num_segments, 1, self.slow_temporal_stride // fast)


# -- GluonCV ------------------------------------------------------------------------------------


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
    return _centre_offsets(num_frames, spec, long_enough=num_frames > spec.num_segments + spec.skip_length - 1)


def testing_offsets(num_frames: int, spec: ClipSpec) -> np.ndarray:
    """As :func:`val_offsets`, but only videos shorter than the clip all start at frame 1."""
    return _centre_offsets(num_frames, spec, long_enough=num_frames > spec.skip_length - 1)


def _centre_offsets(num_frames: int, spec: ClipSpec, long_enough: bool) -> np.ndarray:
    if not long_enough:
        return np.ones(spec.num_segments, dtype=np.int64)
    tick = (num_frames - spec.skip_length + 1) / float(spec.num_segments)
    return np.array([int(tick / 2.0 + tick * x) for x in range(spec.num_segments)], dtype=np.int64) + 1


def offsets_for(mode: str, num_frames: int, spec: ClipSpec, rng: np.random.Generator) -> np.ndarray:
    if mode == "train":
        return train_offsets(num_frames, spec, rng)
    if mode == "val":
        return val_offsets(num_frames, spec)
    if mode == "test":
        return testing_offsets(num_frames, spec)
    raise ClipflowError(f"sampling mode must be one of {', '.join(MODES)}, not {mode!r}")


def skip_offsets(spec: ClipSpec, rng: np.random.Generator) -> list[int]:
    """Temporal jitter: per position of the span, how many frames later it reads (random below new_step)."""
    return [int(j) for j in rng.integers(spec.new_step, size=spec.new_length)]


def span_indices(offset: int, num_frames: int, spec: ClipSpec, jitter: Sequence[int] | None = None) -> list[int]:
    """0-based frame indices of the ``new_length`` frames of one clip starting at 1-based ``offset``."""
    ids = []
    for i in range(spec.new_length):
        late = 0 if jitter is None else int(jitter[i])
        ids.append(offset + late - 1 if offset + late <= num_frames else offset - 1)
        if offset + spec.new_step < num_frames:
            offset += spec.new_step
    return ids


def slowfast_segments(
    offsets: np.ndarray, num_frames: int, spec: ClipSpec, jitter: Sequence[int] | None = None
) -> list[tuple[list[int], list[int]]]:
    """Per segment, its (fast, slow) 0-based frame indices."""
    segments = []
    for offset in offsets:
        span = span_indices(int(offset), num_frames, spec, jitter)
        fast = [f for i, f in enumerate(span) if (i + 1) % spec.fast_temporal_stride == 0]
        slow = [f for i, f in enumerate(span) if (i + 1) % spec.slow_temporal_stride == 0]
        segments.append((fast, slow))
    return segments


def slowfast_indices(
    offsets: np.ndarray, num_frames: int, spec: ClipSpec, jitter: Sequence[int] | None = None
) -> tuple[list[int], list[int]]:
    """(fast, slow) 0-based frame indices, each over all segments in order."""
    segments = slowfast_segments(offsets, num_frames, spec, jitter)
    return [f for fast, _ in segments for f in fast], [f for _, slow in segments for f in slow]


def gluoncv_frame_list(
    offsets: np.ndarray, num_frames: int, spec: ClipSpec, jitter: Sequence[int] | None = None
) -> list[int]:
    """The frames in the order GluonCV's SlowFast loader reads them: per segment, fast then slow."""
    return [f for fast, slow in slowfast_segments(offsets, num_frames, spec, jitter) for f in fast + slow]


# -- PySlowFast ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PySlowFastSpec:
    num_frames: int = 32  # fast pathway frames
    sampling_rate: int = 2
    alpha: int = 8
    target_fps: float = 30.0


def pyslowfast_indices(
    num_frames: int,
    fps: float,
    spec: PySlowFastSpec,
    clip_idx: int = -1,
    num_clips: int = 1,
    rng: np.random.Generator | None = None,
) -> tuple[list[int], list[int]]:
    """(fast, slow) 0-based frame indices of one clip; ``clip_idx`` -1 draws its start (training)."""
    if fps <= 0:
        raise ClipflowError(f"PySlowFast sampling needs the video's frame rate, got {fps!r}")
    clip_size = spec.sampling_rate * spec.num_frames / spec.target_fps * fps
    delta = max(num_frames - clip_size, 0.0)
    if clip_idx == -1:
        start = float((rng or np.random.default_rng()).uniform(0, delta))
    else:
        start = delta * clip_idx / num_clips
    import torch  # here only: the recipe checks read this module without loading torch

    # float32 linspace truncated to integers, exactly as PySlowFast indexes its decoded frames
    index = torch.linspace(start, start + clip_size - 1, spec.num_frames)
    fast = torch.clamp(index, 0, num_frames - 1).long().tolist()
    pick = torch.linspace(0, spec.num_frames - 1, spec.num_frames // spec.alpha).long().tolist()
    return fast, [fast[i] for i in pick]
