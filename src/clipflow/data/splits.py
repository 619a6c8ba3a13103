"""Split a training list into one list per worker, all of the same length.

Like MXNet's SplitSampler, each worker owns a contiguous part of the set, but the
set is first shuffled from the seed, and when it does not divide by the number of
workers the last parts are filled by wrapping to the start, so no worker runs out
of batches before the others (the uneven last batch is what hangs dist_sync).
Within its part, a worker reshuffles every epoch from (seed, epoch).
"""

from __future__ import annotations

import numpy as np

from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError


def split_entries(entries: list[VideoEntry], num_workers: int, seed: int) -> list[list[VideoEntry]]:
    if num_workers < 1:
        raise ClipflowError(f"num_workers must be at least 1, got {num_workers}")
    if len(entries) < num_workers:
        raise ClipflowError(f"{len(entries)} training videos cannot be split over {num_workers} workers")
    order = np.random.default_rng(seed).permutation(len(entries))
    part = -(-len(entries) // num_workers)  # ceil: every video is in some part
    wrapped = np.concatenate([order, order[: part * num_workers - len(order)]])
    return [[entries[i] for i in wrapped[r * part : (r + 1) * part]] for r in range(num_workers)]


def epoch_order(length: int, seed: int, epoch: int) -> np.ndarray:
    """The order a worker visits its part in `epoch`: the same on every host."""
    return np.random.default_rng([seed, epoch]).permutation(length)
