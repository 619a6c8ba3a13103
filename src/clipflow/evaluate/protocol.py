"""The recipe's test protocol: every view of a video scored, and the views ensembled per video.

A video recipe's test mode (clipflow.data.dataset.SlowFastClips) gives each video's
``test_clips x test_crops`` views (clip-major), decoded once; an image recipe's gives one view (the
validation view: the whole image at the default crop, else the centre crop). A batch holds the views
of whole videos, so a video's views are always scored together and its scores do not depend on which
worker scored it; a forward pass takes at most ``batch_size`` views. Per video: the mean of its views'
softmax probabilities (PySlowFast's ensemble), its loss ``-log`` of that mean's probability of the
label, and how many views had the label in their top-1 and top-min(5, classes).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from clipflow.data.cifar.batches import SIDE
from clipflow.data.loader import make_loader
from clipflow.evaluate.metrics import top_k
from clipflow.train.trainer import transform_spec


def protocol_of(recipe: dict) -> str:
    """The protocol in words, from the recipe's data settings."""
    d = recipe["data"]
    if d["kind"] == "image":
        size = d["input_size"]
        return "1 view (whole image)" if size == SIDE else f"1 view (centre {size}x{size} crop)"
    spec = transform_spec(recipe)  # the test views, with TransformSpec's defaults where the recipe is silent
    clips, crops, size = spec.test_clips, spec.test_crops, spec.input_size
    return (
        f"{clips} clip{'s' if clips != 1 else ''} x {crops} crop{'s' if crops != 1 else ''} of {size}x{size}, "
        f"frames resized to {d['new_width']}x{d['new_height']}"
    )


def videos_per_batch(batch_size: int, views: int) -> int:
    """Whole videos per batch: ``batch_size`` views rounded down, at least one video (whose views then go
    through the model ``batch_size`` at a time)."""
    return max(1, batch_size // views)


def score_videos(
    model: torch.nn.Module,
    dataset,
    share: Sequence[int],
    batch_size: int,
    device: torch.device,
    classes: int,
    loader_workers: int = 0,
    prefetch: int = 2,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the videos ``share`` (indices of ``dataset``, in test mode), in that order: mean probabilities
    [n, classes] (float64), view hits [n, 2] (int64: top-1, top-k) and loss [n] (float64).
    ``loader_workers`` processes decode ahead (the recipe's train.loader_workers; test views are not random)."""
    views = dataset.views
    k = top_k(classes)
    loader = make_loader(dataset, videos_per_batch(batch_size, views), list(share), loader_workers, prefetch,
                         drop_last=False, device=device, persistent=False)  # fmt: skip
    probs, hits, losses = [], [], []
    with torch.no_grad():
        for *inputs, labels in loader:
            videos = len(labels)
            flat = [x.reshape(videos * views, *x.shape[2:]) if dataset.mode == "test" else x for x in inputs]
            flat = [dataset.normalize(x.to(device)) for x in flat]
            step = min(batch_size, len(flat[0]))  # a video with more views than batch_size: passes of its views
            logits = torch.cat([model(*(x[i : i + step] for x in flat)) for i in range(0, len(flat[0]), step)])
            logits = logits.to(torch.float64).cpu()
            logits = logits.reshape(videos, views, classes)
            best = logits.topk(k, dim=2).indices  # [videos, views, k]
            labels = labels.to(torch.int64)
            on_label = best == labels[:, None, None]
            hits.append(torch.stack([on_label[:, :, 0].sum(dim=1), on_label.any(dim=2).sum(dim=1)], dim=1))
            mean = logits.softmax(dim=2).mean(dim=1)
            probs.append(mean)
            chosen = mean.gather(1, labels[:, None])[:, 0]
            losses.append(-chosen.clamp_min(torch.finfo(torch.float64).tiny).log())
    if not probs:
        none = torch.zeros(0, dtype=torch.float64)
        return none.reshape(0, 1).expand(0, classes), torch.zeros(0, 2, dtype=torch.int64), none
    return torch.cat(probs), torch.cat(hits).to(torch.int64), torch.cat(losses)
