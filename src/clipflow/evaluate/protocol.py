"""The recipe's test protocol: which views of a video are scored (the scoring itself, and how the views make a
batch, is :func:`clipflow.models.scoring.score_videos` with :func:`~clipflow.models.scoring.videos_per_batch`).

A video recipe's test mode (clipflow.data.dataset.SlowFastClips) gives each video's
``test_clips x test_crops`` views (clip-major), decoded once; an image recipe's gives one view (the
validation view: the whole image at the default crop, else the centre crop). A batch holds the views
of whole videos, so a video's views are always scored together and its scores do not depend on which
worker scored it; a forward pass takes at most ``batch_size`` views. Per video: the mean of its views'
softmax probabilities (PySlowFast's ensemble), its loss ``-log`` of that mean's probability of the
label, and how many views had the label in their top-1 and top-min(5, classes).
"""

from __future__ import annotations

from clipflow.data.cifar.batches import SIDE
from clipflow.data.transforms import TransformSpec


def protocol_of(recipe: dict) -> str:
    """The protocol in words, from the recipe's data settings."""
    d = recipe["data"]
    if d["kind"] == "image":
        size = d["input_size"]
        return "1 view (whole image)" if size == SIDE else f"1 view (centre {size}x{size} crop)"
    spec = TransformSpec.from_recipe(recipe)  # the test views, with TransformSpec's defaults where the recipe is silent
    clips, crops, size = spec.test_clips, spec.test_crops, spec.input_size
    return (
        f"{clips} clip{'s' if clips != 1 else ''} x {crops} crop{'s' if crops != 1 else ''} of {size}x{size}, "
        f"frames resized to {d['new_width']}x{d['new_height']}"
    )
