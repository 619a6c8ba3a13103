"""The dataset a recipe trains, validates or evaluates on, built from the recipe: clips of videos
(:class:`clipflow.data.dataset.SlowFastClips`) or CIFAR-format images
(:class:`clipflow.data.cifar.dataset.CifarImages`).

Every part of a dataset that the recipe sets is built by that part's own ``from_recipe`` (ClipSpec,
TransformSpec, ImageSpec); this module only chooses the kind and hands over the list, root, mode and seed.
"""

from __future__ import annotations

from pathlib import Path

from clipflow.data.dataset import SlowFastClips
from clipflow.data.listfile import VideoEntry
from clipflow.data.sampling import ClipSpec
from clipflow.data.transforms import TransformSpec


def build_dataset(recipe: dict, list_path: str | Path, root: str | Path, mode: str, seed: int,
                  entries: list[VideoEntry] | None = None, keys: list[int] | None = None):  # fmt: skip
    """The recipe's dataset of ``list_path`` (paths relative to ``root``) in ``mode`` (train, val or test).
    With ``entries``, of those videos instead (``list_path`` names where they come from in messages); ``keys``:
    what each item's random draws are keyed by (default its index; see SlowFastClips)."""
    d = recipe["data"]
    if d["kind"] == "image":
        from clipflow.data.cifar.dataset import CifarImages
        from clipflow.data.cifar.transforms import ImageSpec

        return CifarImages(Path(list_path), Path(root), mode, seed, ImageSpec.from_recipe(recipe), entries, keys)
    return SlowFastClips(
        list_path,
        root,
        ClipSpec.from_recipe(recipe).on_every(d["videos_keep_every"]),
        TransformSpec.from_recipe(recipe),
        d["new_width"],
        d["new_height"],
        mode,
        seed,
        recipe["model"]["num_classes"],
        d["decoder"],
        entries,
        keys,
    )
