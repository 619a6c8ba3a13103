"""A class-per-folder tree of real videos, as a user keeps them (``videos/<class>/<name>.mp4``): clipflow's
synthetic motion clips, one motion a class folder, for the folder source's tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clipflow.data.synthetic import CLASSES, SyntheticSpec, render, write_video

# the vertical motions at both speeds: a horizontal flip (the own-data recipe's augmentation) keeps their class
MOTIONS = ["down_slow", "down_fast", "up_slow", "up_fast"]


def write_motion_video(path: Path, motion: str, seed: int, frames: int = 48, short_side: int = 48) -> Path:
    """One video of ``motion`` (a class of clipflow.data.synthetic) at ``path``."""
    spec = SyntheticSpec(num_train=8, num_val=8, min_frames=frames, max_frames=frames, short_side=short_side)
    label = CLASSES.index(motion)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(path, render(label, frames, spec, np.random.default_rng([label, seed])), spec.fps,
                spec.keyframe_interval)  # fmt: skip
    return path


def make_class_folders(root: Path, folders: list[str], per_class: int = 5, frames: int = 48,
                       short_side: int = 48) -> dict[str, list[Path]]:  # fmt: skip
    """``per_class`` videos of ``frames`` frames under ``root/<folder>/`` for each of ``folders`` (at most 4), named
    as a phone names them, each folder showing one motion of :data:`MOTIONS`; folder -> its videos."""
    return {
        folder: [write_motion_video(root / folder / f"VID_20261{i:03d}.mp4", motion, i, frames, short_side)
                 for i in range(per_class)]
        for folder, motion in zip(folders, MOTIONS, strict=False)
    }  # fmt: skip
