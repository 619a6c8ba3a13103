"""The numbers of an evaluation, from the per-video tensors the workers gathered.

Inputs, one row per video of the list (in list order): ``probs`` [N, classes], the mean over the
video's views of their softmax probabilities (PySlowFast's ensemble of a multi-view test);
``clip_hits`` [N, 2], how many of its views had the label in their top-1 and top-k; ``loss`` [N],
``-log`` of the mean probability of the label; ``labels`` [N]. top-k is top-min(5, classes).

Clip level counts views (hits over N x views); video level scores the mean probabilities. Per class:
the videos of that label and their video-level top-1 (None for a class without videos). The confusion
matrix counts videos by true label (row) and video-level top-1 prediction (column). Per video (``videos``, in
list order, given the list's paths): its path as the list writes it, its label, its video-level top-1
prediction and that prediction's mean probability (what `clipflow predict` answers first for the video).
"""

from __future__ import annotations

import torch

from clipflow.models.scoring import top_k


def video_metrics(
    probs: torch.Tensor,
    clip_hits: torch.Tensor,
    loss: torch.Tensor,
    labels: torch.Tensor,
    views: int,
    names: list[str],
    paths: list[str] | None = None,
) -> dict:
    """top1, top5, loss (video level, at the top), ``clip`` and ``video`` accuracies, ``classes``,
    ``per_class`` and ``confusion``, and with the list's ``paths`` each video's prediction (``videos``), as
    metrics.json holds them."""
    n, classes = probs.shape
    labels = labels.to(torch.int64).cpu()
    best = probs.cpu().topk(top_k(classes), dim=1).indices
    predicted = best[:, 0]
    video_top1 = (predicted == labels).to(torch.int64)
    video_topk = (best == labels[:, None]).any(dim=1).to(torch.int64)
    confusion = torch.zeros(classes, classes, dtype=torch.int64)
    confusion.index_put_((labels, predicted), torch.ones(n, dtype=torch.int64), accumulate=True)
    per_class = []
    for label in range(classes):
        mine = labels == label
        count = int(mine.sum())
        hits = int(video_top1[mine].sum())
        top1 = hits / count if count else None
        per_class.append({"label": label, "name": names[label], "videos": count, "top1": top1})
    video = {"top1": int(video_top1.sum()) / n, "top5": int(video_topk.sum()) / n}
    hits = clip_hits.to(torch.int64).cpu().sum(dim=0)
    metrics = {
        "top1": video["top1"],
        "top5": video["top5"],
        "loss": float(loss.to(torch.float64).cpu().mean()),
        "clip": {"top1": int(hits[0]) / (n * views), "top5": int(hits[1]) / (n * views)},
        "video": video,
        "classes": list(names),
        "per_class": per_class,
        "confusion": confusion.tolist(),
    }
    if paths is not None:
        chosen = probs.cpu().to(torch.float64).gather(1, predicted[:, None])[:, 0]
        metrics["videos"] = [
            {"path": path, "label": label, "predicted": guess, "probability": p}
            for path, label, guess, p in zip(paths, labels.tolist(), predicted.tolist(), chosen.tolist(), strict=True)
        ]
    return metrics


def summary_line(metrics: dict) -> str:
    """metrics.json's headline numbers, in one line."""
    return (
        f"test protocol ({metrics['protocol']}) on {metrics['num_videos']} videos, {metrics['workers']} worker(s): "
        f"video top-1 {metrics['top1']:.4f} top-5 {metrics['top5']:.4f}, "
        f"clip top-1 {metrics['clip']['top1']:.4f} top-5 {metrics['clip']['top5']:.4f}"
    )
