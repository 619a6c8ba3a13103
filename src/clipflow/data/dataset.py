"""A torch Dataset of SlowFast clips read with decord from a scanned list file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from clipflow.data.listfile import VideoEntry, read_list
from clipflow.data.sampling import MODES, ClipSpec, offsets_for, skip_offsets, slowfast_indices
from clipflow.data.transforms import TransformSpec, apply, center_crop_box, to_float_clip, train_crop_box
from clipflow.errors import ClipflowError


@dataclass(frozen=True)
class ClipPlan:
    """What one item reads and how it is cropped: 0-based frame indices per pathway, 1-based segment
    offsets, the crop box (top, left, height, width) in the decoded frame, and the flip."""

    offsets: list[int]
    jitter: list[int] | None  # per span position, frames read later (temporal jitter, training only)
    fast: list[int]
    slow: list[int]
    box: tuple[int, int, int, int]
    flip: bool


class SlowFastClips(Dataset):
    """Item i: (slow, fast, label); slow and fast are (C, T, H, W) float tensors.

    mode "train" draws random offsets, crops and flips from (seed, epoch, index), so
    a clip is reproducible whatever process loads it; "val" and "test" are deterministic
    (GluonCV's centre offsets, a centre crop).
    Videos are decoded at (new_width, new_height), as GluonCV's decord loader does.
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
    ):
        if mode not in MODES:
            raise ClipflowError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.list_path = Path(list_path)
        self.entries: list[VideoEntry] = read_list(list_path, num_classes)
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

    def _read(self, entry: VideoEntry, indices: list[int]) -> np.ndarray:
        import decord

        path = entry.resolve(self.root)
        if not path.exists():
            raise ClipflowError(
                f"video {path} (listed in {self.list_path} line {entry.line}) does not exist; "
                "rescan the data set or fix the list"
            )
        try:
            reader = decord.VideoReader(str(path), width=self.new_width, height=self.new_height, num_threads=1)
            return reader.get_batch(indices).asnumpy()
        except Exception as exc:
            raise ClipflowError(
                f"cannot decode {path} (listed in {self.list_path} line {entry.line}): {str(exc).splitlines()[0]}"
            ) from None

    def plan(self, index: int) -> ClipPlan:
        """The frames item ``index`` reads in this epoch and its crop, without decoding anything."""
        entry = self.entries[index]
        frames_total = int(entry.num_frames or 0)
        rng = np.random.default_rng([self.seed, self.epoch, index])
        offsets = offsets_for(self.mode, frames_total, self.clip, rng)
        jitter = skip_offsets(self.clip, rng) if self.clip.temporal_jitter and self.mode == "train" else None
        fast, slow = slowfast_indices(offsets, frames_total, self.clip, jitter)
        height, width = self.new_height, self.new_width
        if self.mode == "train":
            box = train_crop_box(height, width, self.transform, rng)
            flip = self.transform.random_flip and bool(rng.integers(2))
        else:
            box, flip = center_crop_box(height, width, self.transform.input_size), False
        return ClipPlan([int(o) for o in offsets], jitter, fast, slow, box, flip)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        entry = self.entries[index]
        plan = self.plan(index)
        unique = sorted(set(plan.fast + plan.slow))
        clip = to_float_clip(self._read(entry, unique))
        position = {f: i for i, f in enumerate(unique)}
        fast = apply(clip[:, [position[f] for f in plan.fast]], plan.box, plan.flip, self.transform)
        slow = apply(clip[:, [position[f] for f in plan.slow]], plan.box, plan.flip, self.transform)
        return slow, fast, entry.label
