"""Scoring a val list: during training each worker scores its share and the totals are summed; the
evaluate stage scores the whole list in one process (rank 0 of 1).

Worker ``rank`` of ``W`` takes videos ``rank, rank + W, ...`` of the list (every video
once over all workers), one centre clip each (the dataset's "val" mode), in batches
of ``eval_batch_size``; :meth:`ValShard.totals` gives (loss sum, top-1 hits, top-5
hits, videos) for the trainer to sum over the workers, so the epoch's val loss, top-1
and top-5 are over the whole list. The model runs in eval mode with this worker's
BatchNorm statistics.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from clipflow.data.loader import make_loader


class ValShard:
    def __init__(self, dataset, rank: int, num_workers: int, batch_size: int, device: torch.device | None = None):
        self.dataset = dataset
        self.device = device or torch.device("cpu")
        share = list(range(rank, len(dataset), num_workers))
        self.loader = make_loader(dataset, batch_size, share, workers=0, drop_last=False, device=self.device)

    def totals(self, logits_of: Callable[..., torch.Tensor], classes: int) -> torch.Tensor:
        """(loss sum, top-1 hits, top-5 hits, items) over this worker's share; top-5 is top-k for fewer classes.
        ``logits_of`` takes the normalised inputs of a batch (slow and fast clips, or images)."""
        k = min(5, classes)
        out = torch.zeros(4, dtype=torch.float64)
        with torch.no_grad():
            for *inputs, labels in self.loader:
                logits = logits_of(*(self.dataset.normalize(x.to(self.device)) for x in inputs)).cpu()
                best = logits.topk(k, dim=1).indices
                out += torch.tensor([
                    float(F.cross_entropy(logits, labels, reduction="sum")),
                    float((best[:, 0] == labels).sum()),
                    float((best == labels[:, None]).any(dim=1).sum()),
                    float(len(labels)),
                ], dtype=torch.float64)  # fmt: skip
        return out
