"""The one scoring loop: a model's logits for every view of the items of a loader, batch by batch. Here, below
both of its users (training's validation and evaluation), so neither imports the other.

Validation while training (:class:`clipflow.train.validate.ValShard`, one centre view an item) and the
test protocol (:func:`score_videos`, every view of a video) both run :func:`view_logits` and only reduce
its logits differently: :func:`val_totals` to (loss sum, top-1 hits, top-5 hits, items), :func:`score_videos`
to each video's mean probabilities, view hits and loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F

from clipflow.data.loader import make_loader

Forward = Callable[..., torch.Tensor]  # the normalised inputs of a batch (slow and fast clips, or images) -> logits


def top_k(classes: int) -> int:
    return min(5, classes)


def videos_per_batch(batch_size: int, views: int) -> int:
    """Whole videos per batch: ``batch_size`` views rounded down, at least one video (whose views then go
    through the model ``batch_size`` at a time)."""
    return max(1, batch_size // views)


def view_logits(
    forward: Forward, dataset, loader: Iterable, batch_size: int, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Per batch of ``loader`` (whole items of ``dataset``): (logits [items, views, classes] on the CPU, labels).

    A test-mode item holds all its views; they go through ``forward`` at most ``batch_size`` at a time (an item
    with more views than that takes several passes). No gradients are kept."""
    views = dataset.views
    with torch.no_grad():
        for *inputs, labels in loader:
            items = len(labels)
            flat = [x.reshape(items * views, *x.shape[2:]) if dataset.mode == "test" else x for x in inputs]
            flat = [dataset.normalize(x.to(device)) for x in flat]
            step = min(batch_size, len(flat[0]))
            logits = torch.cat([forward(*(x[i : i + step] for x in flat)) for i in range(0, len(flat[0]), step)])
            yield logits.cpu().reshape(items, views, -1), labels


def val_totals(forward: Forward, dataset, loader: Iterable, batch_size: int, device: torch.device,
               classes: int) -> torch.Tensor:  # fmt: skip
    """(loss sum, top-1 hits, top-5 hits, items) over ``loader``'s items, one view each, as float64; top-5 is
    top-k for fewer classes."""
    k = top_k(classes)
    out = torch.zeros(4, dtype=torch.float64)
    for logits, labels in view_logits(forward, dataset, loader, batch_size, device):
        logits = logits[:, 0]
        best = logits.topk(k, dim=1).indices
        out += torch.tensor([
            float(F.cross_entropy(logits, labels, reduction="sum")),
            float((best[:, 0] == labels).sum()),
            float((best == labels[:, None]).any(dim=1).sum()),
            float(len(labels)),
        ], dtype=torch.float64)  # fmt: skip
    return out


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
    """The test protocol on the videos ``share`` (indices of ``dataset``, in test mode), in that order: mean
    probabilities [n, classes] (float64), view hits [n, 2] (int64: top-1, top-k) and loss [n] (float64).
    A batch holds whole videos, ``batch_size`` views at most where a video has fewer; ``loader_workers``
    processes decode ahead (the recipe's train.loader_workers; test views are not random)."""
    k = top_k(classes)
    loader = make_loader(dataset, videos_per_batch(batch_size, dataset.views), list(share), loader_workers, prefetch,
                         drop_last=False, device=device, persistent=False)  # fmt: skip
    probs, hits, losses = [], [], []
    for logits, labels in view_logits(model, dataset, loader, batch_size, device):
        logits = logits.to(torch.float64)
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
