"""What a recipe reads of each video: the frames and crop of every clip, as records (`clipflow data frames`).

One record per clip, in the dataset's order: per video in train and val mode, per view in test mode
(test_clips x test_crops, clip-major). Each holds the video, its label and frame count, the clip's offsets,
its fast and slow frames, GluonCV's own frame order for the same draw, the crop box and the flip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from clipflow.data.build import build_dataset
from clipflow.data.sampling import gluoncv_frame_list


def frame_records(recipe: dict, list_path: str | Path, root: str | Path, mode: str, seed: int,
                  epoch: int) -> Iterator[dict]:  # fmt: skip
    """The records of ``list_path``'s videos (paths relative to ``root``) in training ``epoch`` (1-based)."""
    dataset = build_dataset(recipe, list_path, root, mode, seed)
    dataset.set_epoch(epoch)
    for index, entry in enumerate(dataset.entries):
        for plan in dataset.plans(index):
            record = {
                "path": entry.path,
                "label": entry.label,
                "num_frames": entry.num_frames,
                "offsets": plan.offsets,
                "fast": plan.fast,
                "slow": plan.slow,
                "gluoncv_order": gluoncv_frame_list(
                    np.array(plan.offsets), int(entry.num_frames or 0), dataset.clip, plan.jitter
                ),
                "crop": dict(zip(("top", "left", "height", "width"), plan.box, strict=True)),
                "flip": plan.flip,
            }
            if dataset.mode == "test":
                record["view"] = {"clip": plan.clip_index, "crop": plan.crop_index}
            yield record
