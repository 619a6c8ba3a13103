"""Split a training list into one list per worker, all of the same length, and walk a worker's part.

Like MXNet's SplitSampler, each worker owns a contiguous part of the set, but the
set is first shuffled from the seed. When it does not divide by the number of
workers, ``fill`` says what happens: ``wrap`` fills the last parts by wrapping to
the start (every video is used), ``drop`` leaves the remainder out (no video twice).
Either way no worker runs out of batches before the others (the uneven last batch is
what hangs dist_sync). Within its part, a worker reshuffles every epoch from
(seed, epoch): :class:`EpochSampler`, whose position a checkpoint saves so that a
resumed epoch neither repeats nor skips a sample.

Gradient accumulation (the recipe's ``train.accumulate`` k) makes S = workers x k micro-batch *slots*: the set
is split into S parts, and worker r's list holds its k slots' parts one after another, each of the same length
L (slot r * k + m is entries [m * L, (m + 1) * L) of worker{r}.lst: :func:`split_slots`). With k = 1 a slot
is a worker and the lists are the plain split. A slot is a worker's share as it was before accumulation: 2
workers with k = 2 hold the parts, in the same order, that 4 workers with k = 1 hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from clipflow.data.listfile import VideoEntry, list_text, read_list
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir
from clipflow.made import Made

FILLS = ("wrap", "drop")


def split_entries(entries: list[VideoEntry], num_workers: int, seed: int, fill: str = "wrap") -> list[list[VideoEntry]]:
    if num_workers < 1:
        raise ClipflowError(f"num_workers must be at least 1, got {num_workers}")
    if fill not in FILLS:
        raise ClipflowError(f"split fill must be one of {', '.join(FILLS)}, not {fill!r}")
    if len(entries) < num_workers:
        raise ClipflowError(f"{len(entries)} training videos cannot be split over {num_workers} workers")
    order = np.random.default_rng(seed).permutation(len(entries))
    if fill == "wrap":
        part = -(-len(entries) // num_workers)  # ceil: every video is in some part
        order = np.concatenate([order, order[: part * num_workers - len(order)]])
    else:
        part = len(entries) // num_workers
    return [[entries[i] for i in order[r * part : (r + 1) * part]] for r in range(num_workers)]


def split_slots(entries: list[VideoEntry], num_workers: int, accumulate: int, seed: int,
                fill: str = "wrap") -> list[list[VideoEntry]]:  # fmt: skip
    """One list per worker: its ``accumulate`` slots' parts of :func:`split_entries` over workers x accumulate
    slots, one after another (see the module)."""
    if accumulate < 1:
        raise ClipflowError(f"accumulate must be at least 1 (micro-batches per step), got {accumulate}")
    parts = split_entries(entries, num_workers * accumulate, seed, fill)
    return [[e for part in parts[r * accumulate : (r + 1) * accumulate] for e in part] for r in range(num_workers)]


def epoch_order(length: int, seed: int, epoch: int) -> np.ndarray:
    """The order a worker visits its part in `epoch`: the same on every host."""
    return np.random.default_rng([seed, epoch]).permutation(length)


class EpochSampler:  # a sampler as torch's DataLoader takes one (__iter__, __len__); no torch import for `splits`
    """A worker's indices for one epoch: its part in :func:`epoch_order`, the first ``limit`` of them,
    from ``position`` on (0, or where :meth:`resume` put it)."""

    def __init__(self, length: int, seed: int, limit: int | None = None) -> None:
        if length < 1:
            raise ClipflowError(f"a worker's part must hold at least one video, got {length}")
        self.length, self.seed = length, seed
        self.limit = length if limit is None else min(limit, length)
        self.epoch, self.position = 0, 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (unless :meth:`resume` names this epoch afterwards)."""
        self.epoch, self.position = epoch, 0

    def __iter__(self) -> Iterator[int]:
        return iter(epoch_order(self.length, self.seed, self.epoch)[self.position : self.limit].tolist())

    def __len__(self) -> int:
        return self.limit - self.position

    def state(self, consumed: int) -> dict[str, int]:
        """What a checkpoint keeps after ``consumed`` samples of this epoch went through training."""
        return {"epoch": self.epoch, "position": self.position + consumed, "length": self.length, "seed": self.seed}

    def resume(self, state: Mapping[str, int]) -> None:
        """Continue the epoch of a checkpoint's :meth:`state` at the sample after the last one trained."""
        for name in ("length", "seed"):
            if state.get(name) != getattr(self, name):
                raise ClipflowError(
                    f"cannot resume the sampler: the checkpoint's {name} is {state.get(name)!r}, "
                    f"this run's {getattr(self, name)!r} (another split or seed)"
                )
        position = state.get("position")
        if not isinstance(position, int) or not 0 <= position <= self.limit:
            raise ClipflowError(f"cannot resume the sampler at position {position!r}: the epoch has {self.limit}")
        self.epoch, self.position = int(state["epoch"]), position


def write_splits(list_path: str | Path, num_workers: int, seed: int, out_dir: str | Path,
                 fill: str = "wrap", accumulate: int = 1) -> list[list[VideoEntry]]:  # fmt: skip
    """``out_dir``/worker{r}.lst for every worker, all of the same length (:func:`split_slots`: ``accumulate``
    slots' parts per worker); the workers' lists.
    The lists are recorded as clipflow's (:mod:`clipflow.made`): someone else's file of one of their names in
    ``out_dir`` is refused before anything is written."""
    made = Made(check_output_dir(out_dir, "--out-dir"), "--out-dir")
    names = [f"worker{rank}.lst" for rank in range(max(num_workers, 0))]
    parts = split_slots(read_list(list_path), num_workers, accumulate, seed, fill)
    made.check(names)
    made.write_all({name: list_text(part).encode("utf-8") for name, part in zip(names, parts, strict=True)})
    return parts
