"""Validation while training: each worker scores its share of the val list, and the trainer sums the totals.

Worker ``rank`` of ``W`` takes videos ``rank, rank + W, ...`` of the list (every video once over all workers),
one centre clip each (the dataset's "val" mode), in batches of ``eval_batch_size``; :meth:`ValShard.totals`
gives (loss sum, top-1 hits, top-5 hits, videos) through the scoring loop that evaluation uses too
(:mod:`clipflow.models.scoring`), so the epoch's val loss, top-1 and top-5 are over the whole list. The model
runs in eval mode with this worker's BatchNorm statistics.
"""

from __future__ import annotations

import torch

from clipflow.data.loader import make_loader
from clipflow.models.scoring import Forward, val_totals


class ValShard:
    def __init__(self, dataset, rank: int, num_workers: int, batch_size: int, device: torch.device | None = None):
        self.dataset, self.batch_size = dataset, batch_size
        self.device = device or torch.device("cpu")
        share = list(range(rank, len(dataset), num_workers))
        self.loader = make_loader(dataset, batch_size, share, workers=0, drop_last=False, device=self.device)

    def totals(self, logits_of: Forward, classes: int) -> torch.Tensor:
        """(loss sum, top-1 hits, top-5 hits, items) over this worker's share; ``logits_of`` takes the normalised
        inputs of a batch (slow and fast clips, or images)."""
        return val_totals(logits_of, self.dataset, self.loader, self.batch_size, self.device, classes)
