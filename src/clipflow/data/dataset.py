"""A torch Dataset of SlowFast clips read from a scanned list file.

Each item decodes its video once, one read (clipflow.data.reader: PyAV, or decord)
of the sorted union of the frames its clips read, and crops, resizes and flips them
as uint8 (clipflow.data.pixels); clipflow.data.pixels.normalize_clips
normalises a batch where the model runs.

Test views. Mode "test" gives ``test_clips`` clips x ``test_crops`` crops per video.
Temporally it is GluonCV's multi-clip test (test_recognizer with ``--num-segments``
``test_clips``): VideoClsCustom's test offsets for ``test_clips`` segments, i.e. the
video less one span is cut into ``test_clips`` equal chunks and clip ``i`` starts at
the centre of chunk ``i`` (1-based offset ``int(tick / 2 + tick * i) + 1``, ``tick =
(num_frames - skip_length + 1) / test_clips``); a video shorter than the span has all
its clips at frame 1. With ``num_segments`` S > 1 the video is cut into
``test_clips * S`` chunks and clip ``i`` takes chunks ``i, i + test_clips, ...``, so
each clip spans the whole video as the validation clip does. With one segment, a
1-clip test is the validation clip. (PySlowFast instead starts clip ``i`` at ``i / n`` of the slack, so
its clip 0 is the video's start and one clip is not the centre:
clipflow.data.sampling.pyslowfast_indices.) Spatially see
clipflow.data.transforms.test_crop_boxes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from clipflow.data.listfile import VideoEntry, read_list
from clipflow.data.pixels import as_video, normalize_clips, transform_clip
from clipflow.data.reader import DECODERS, frames_now, read_frames
from clipflow.data.sampling import (
    MODES,
    ClipSpec,
    offsets_for,
    skip_offsets,
    slowfast_indices,
    testing_offsets,
)
from clipflow.data.scan import RESCAN
from clipflow.data.transforms import TransformSpec, center_crop_box, test_crop_boxes, train_crop_box
from clipflow.errors import ClipflowError


@dataclass(frozen=True)
class ClipPlan:
    """What one clip reads and how it is cropped: 0-based frame indices per pathway, 1-based segment
    offsets, the crop box (top, left, height, width) in the decoded frame, and the flip. In test mode,
    which view it is: ``clip_index`` (temporal) and ``crop_index`` (spatial); 0 in the other modes."""

    offsets: list[int]
    jitter: list[int] | None  # per span position, frames read later (temporal jitter, training only)
    fast: list[int]
    slow: list[int]
    box: tuple[int, int, int, int]
    flip: bool
    clip_index: int = 0
    crop_index: int = 0


@dataclass(frozen=True)
class ClipShape:
    """A training clip of another shape than the recipe's (multigrid, clipflow.train.multigrid): ``frames``
    fast-pathway frames read every sigma-th frame of the span, sigma drawn per clip from ``least_stride`` to
    ``stride`` (the recipe's fast_temporal_stride when ``frames`` is the recipe's), the slow pathway every
    alpha-th of them, cropped as the recipe crops but resized to ``crop`` x ``crop``. A training item's key
    ``(index, shape)`` asks for it."""

    frames: int
    crop: int
    least_stride: int
    stride: int


def needed_frames(plans: list[ClipPlan]) -> list[int]:
    """The sorted union of the frames the clips read: what one decode fetches."""
    return sorted({f for p in plans for f in (*p.fast, *p.slow)})


class SlowFastClips(Dataset):
    """Item i: (slow, fast, label).

    In "train" and "val" slow and fast are (C, T, H, W) uint8 tensors (normalize_clips makes the
    model's input of a batch of them, where the model runs); in "test" they are (V, C, T, H, W),
    V = test_clips x test_crops views ordered clip-major (clip 0 crop 0, clip 0 crop 1, ...), in
    the order of :meth:`plans`.
    Mode "train" draws random offsets, crops and flips from (seed, epoch, key), the key being the
    item's index, or ``keys[index]`` when given (its place in its slot's part: clipflow.train.slots), so
    a clip is reproducible whatever process loads it and whatever list it is loaded from; "val"
    (GluonCV's centre offsets, a centre crop) and "test" (see the module) are deterministic.
    Videos are decoded at (new_width, new_height), as GluonCV's decord loader does, with ``decoder``.
    """

    def __init__(
        self,
        list_path: str | Path,
        root: str | Path,
        clip: ClipSpec,
        transform: TransformSpec,
        new_width: int,
        new_height: int,
        mode: str = "train",
        seed: int = 0,
        num_classes: int | None = None,
        decoder: str = "pyav",
        entries: list[VideoEntry] | None = None,
        keys: list[int] | None = None,
    ):
        if mode not in MODES:
            raise ClipflowError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if decoder not in DECODERS:
            raise ClipflowError(f"data.decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
        transform.check_frame(new_height, new_width, mode)
        # the decoder's module is loaded here, before a DataLoader forks its workers, so they share it:
        # measured, a worker that imports decord itself holds 260 MiB of its own, against 14 MiB
        if decoder in ("torchcodec", "nvdec"):  # imports torchcodec; refuses nvdec where there is no GPU, here
            from clipflow.data.torchcodec_reader import prepare

            prepare(decoder)
        else:
            importlib.import_module("av" if decoder == "pyav" else "decord")
        self.decoder = decoder

        self.list_path = Path(list_path)
        # ``entries`` given: these videos (from the worker lists of a checkpoint's layout), named after list_path
        self.entries: list[VideoEntry] = read_list(list_path, num_classes) if entries is None else list(entries)
        self.keys = keys  # item i's random draws come from (seed, epoch, keys[i]), default i (see the class)
        missing = [e for e in self.entries if e.num_frames is None]
        if missing:
            raise ClipflowError(
                f"{self.list_path} line {missing[0].line}: no frame count; scan the data set first (clipflow data scan)"
            )
        self.root, self.clip, self.transform, self.mode, self.seed = Path(root), clip, transform, mode, seed
        self.new_width, self.new_height = new_width, new_height
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.entries)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        """A uint8 batch of this dataset's clips as the model's float input (the recipe's mean and std)."""
        return normalize_clips(clips, self.transform)

    @property
    def views(self) -> int:
        """Clips per item: test_clips x test_crops in test mode, else 1."""
        return self.transform.test_views if self.mode == "test" else 1

    def _read(self, entry: VideoEntry, indices: list[int]) -> np.ndarray:
        path = entry.resolve(self.root)
        if not path.exists():
            raise ClipflowError(
                f"video {path} (listed in {self.list_path} line {entry.line}) does not exist; "
                "rescan the data set or fix the list"
            )
        try:
            return read_frames(path, indices, self.new_width, self.new_height, self.decoder)
        except ClipflowError as exc:
            where = f"{path} (listed in {self.list_path} line {entry.line})"
            now = frames_now(path)
            if entry.num_frames is not None and now is not None and now != entry.num_frames:
                raise ClipflowError(
                    f"{where} changed since the scan: the index lists {entry.num_frames} frames, the file now holds "
                    f"{now}; rerun the workflow (a changed video reruns the data stage) or `{RESCAN}`"
                ) from None
            raise ClipflowError(f"cannot decode {where}: {exc}") from None

    def test_clip_offsets(self, num_frames: int) -> list[list[int]]:
        """Per test clip, its 1-based segment offsets (the rule is in the module docstring)."""
        n = self.transform.test_clips
        chunks = testing_offsets(num_frames, replace(self.clip, num_segments=n * self.clip.num_segments))
        return [[int(o) for o in chunks[i::n]] for i in range(n)]

    def plan(self, index: int, shape: ClipShape | None = None) -> ClipPlan:
        """The frames item ``index`` reads in this epoch and its crop, without decoding anything; with ``shape``
        (training), a clip of that shape instead of the recipe's.

        In test mode an item has test_clips x test_crops views: this answers only when that is 1.
        """
        if self.mode == "test":
            if self.views != 1:
                raise ClipflowError(
                    f"a test item has {self.views} views (data.test_clips {self.transform.test_clips} x "
                    f"data.test_crops {self.transform.test_crops}), not one plan; use plans(index)"
                )
            return self.plans(index)[0]
        entry = self.entries[index]
        frames_total = int(entry.num_frames or 0)
        rng = np.random.default_rng([self.seed, self.epoch, index if self.keys is None else self.keys[index]])
        clip = self.clip if shape is None else self._shaped_clip(shape, rng)
        offsets = offsets_for(self.mode, frames_total, clip, rng)
        jitter = skip_offsets(clip, rng) if clip.temporal_jitter and self.mode == "train" else None
        fast, slow = slowfast_indices(offsets, frames_total, clip, jitter)
        height, width = self.new_height, self.new_width
        if self.mode == "train":
            box = train_crop_box(height, width, self.transform, rng)
            flip = self.transform.random_flip and bool(rng.integers(2))
        else:
            box, flip = center_crop_box(height, width, self.transform.input_size), False
        return ClipPlan([int(o) for o in offsets], jitter, fast, slow, box, flip)

    def _shaped_clip(self, shape: ClipShape, rng: np.random.Generator) -> ClipSpec:
        """The recipe's sampling for a clip of ``shape``'s frames, its stride drawn from ``rng`` (see ClipShape)."""
        clip = self.clip
        if shape.frames == clip.new_length // clip.fast_temporal_stride and shape.least_stride == shape.stride:
            return clip  # the recipe's frames: only the crop differs
        stride = int(rng.integers(shape.least_stride, shape.stride + 1))
        alpha = clip.slow_temporal_stride // clip.fast_temporal_stride
        return replace(clip, new_length=shape.frames * stride, fast_temporal_stride=stride,
                       slow_temporal_stride=stride * alpha)  # fmt: skip

    def plans(self, index: int) -> list[ClipPlan]:
        """Every clip item ``index`` reads, in output order: its views in test mode, else ``[plan(index)]``."""
        if self.mode != "test":
            return [self.plan(index)]
        frames_total = int(self.entries[index].num_frames or 0)
        boxes = test_crop_boxes(self.new_height, self.new_width, self.transform)
        views = []
        for i, offsets in enumerate(self.test_clip_offsets(frames_total)):
            fast, slow = slowfast_indices(np.array(offsets), frames_total, self.clip)
            views += [ClipPlan(offsets, None, fast, slow, box, False, i, j) for j, box in enumerate(boxes)]
        return views

    def assemble(self, video: torch.Tensor, decoded: list[int], plan: ClipPlan,
                 transform: TransformSpec | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(slow, fast) of one clip, each (C, T, H, W), from the (T, C, H, W) uint8 ``video`` of the ``decoded`` frames.

        Each frame of the clip is transformed once (the slow frames are among the fast ones).
        """
        frames = sorted(set(plan.fast + plan.slow))
        at = {f: i for i, f in enumerate(decoded)}
        pick = None if frames == decoded else [at[f] for f in frames]
        clip = transform_clip(video, plan.box, plan.flip, transform or self.transform, pick)
        local = {f: i for i, f in enumerate(frames)}

        def pathway(indices: list[int]) -> torch.Tensor:
            if indices == frames:
                return clip
            # frames are taken along T of the (T, H, W, C) memory, whole frames at a time; index_select on
            # dim 1 of the (C, T, H, W) view copies pixel by pixel (measured 4 ms against 0.1 a 4x16 clip)
            return clip.transpose(0, 1)[[local[f] for f in indices]].transpose(0, 1)

        return pathway(plan.slow), pathway(plan.fast)

    def __getitem__(self, key: int | tuple[int, ClipShape]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Item ``key``: an index, or in training (index, ClipShape) for a clip of that shape."""
        index, shape = key if isinstance(key, tuple) else (key, None)
        entry = self.entries[index]
        plans = self.plans(index) if shape is None else [self.plan(index, shape)]
        decoded = needed_frames(plans)
        video = as_video(self._read(entry, decoded))
        transform = None if shape is None else replace(self.transform, input_size=shape.crop)
        clips = [self.assemble(video, decoded, plan, transform) for plan in plans]
        if self.mode != "test":
            slow, fast = clips[0]
            return slow, fast, entry.label
        return torch.stack([s for s, _ in clips]), torch.stack([f for _, f in clips]), entry.label
