"""The training loader: a torch DataLoader over a clip dataset, with its worker processes set up for video.

``make_loader(dataset, batch_size, sampler, workers)``:

- ``workers`` 0 loads in the calling process; more start that many worker processes,
  each with one torch thread (the dataset's reader decodes on one thread),
  ``prefetch`` batches ahead per worker, and kept for the whole run (persistent).
  How many, for training: the recipe's numbers, or with ``auto`` (the default) sized by each training worker
  from its measured decode and step times (clipflow.train.loader_sizing).
- The epoch. A dataset such as SlowFastClips draws each clip from (seed, epoch, index)
  and its epoch is set on the main process's object (``set_epoch``); a persistent
  worker holds its own copy, made when it started, that would never see it. So every
  index the sampler gives is sent as (epoch, index), the epoch read from the main
  process's dataset when the epoch's iteration starts, and the worker sets its copy to
  that epoch before loading the item. A clip is then the same with 0 or N workers,
  persistent or not, and a new epoch gives new clips in every worker.
- Nothing global is seeded for the dataset's sake (it does not use the global random
  generators). The loader draws the workers' base seed from a generator of its own, so
  iterating never consumes the training process's torch random stream, whatever the
  number of workers.
- Pinned memory only when the batches go to a CUDA device: pinning costs a copy per
  batch in the main process and buys nothing for CPU training.
- A ClipflowError in a worker (a missing or undecodable video) is raised in the main
  process with its own one-line message, not as DataLoader's "Caught ... in DataLoader
  worker process" traceback; other exceptions (bugs) keep that traceback.

Memory: a reader (PyAV's container, or decord's VideoReader) is made per item and
dropped after one read; bench/loader.py samples the resident memory of the loading
processes over 2,000 clips (docs/benchmarks.md's loader figures: flat once the allocator's pools
are filled).

Batches: clips are stacked in their memory order (stack_in_memory_order), uint8.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from clipflow.environment import read_env
from clipflow.errors import ClipflowError

AUTO = "auto"  # train.loader_workers / loader_prefetch: sized from measurements (clipflow.train.loader_sizing)
DEFAULT_PREFETCH = 2  # batches ahead a loader process keeps when nothing sizes it


class WorkerFailure:
    """What a worker returns in place of an item (and a batch) whose loading raised a ClipflowError."""

    def __init__(self, message: str) -> None:
        self.message = message


class EpochIndices(Sampler):
    """The sampler's indices as (epoch, index), the epoch read from ``dataset.epoch`` when iteration starts."""

    def __init__(self, sampler: Any, dataset: Any) -> None:
        self.sampler, self.dataset = sampler, dataset

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.dataset.epoch
        return ((epoch, index) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class EpochBatches(Sampler):
    """A batch sampler's batches (lists of keys) as lists of (epoch, key), the epoch read as EpochIndices does."""

    def __init__(self, batches: Any, dataset: Any) -> None:
        self.batches, self.dataset = batches, dataset

    def __iter__(self) -> Iterator[list[tuple[int, Any]]]:
        epoch = self.dataset.epoch
        return ([(epoch, key) for key in batch] for batch in self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class AtEpoch(Dataset):
    """Item (epoch, index) of ``dataset`` in that epoch; a ClipflowError becomes a WorkerFailure."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        if self.dataset.epoch != epoch:
            self.dataset.set_epoch(epoch)
        try:
            return self.dataset[index]
        except ClipflowError as exc:
            return WorkerFailure(str(exc))


def stack_in_memory_order(column: list[torch.Tensor]) -> torch.Tensor:
    """default_collate's stack of same-shaped tensors, keeping their memory order.

    A clip is a (C, T, H, W) view of (T, H, W, C) memory (clipflow.data.transforms); a plain stack
    would transpose every clip into (N, C, T, H, W) memory, which measured 3 ms a SlowFast 4x16
    clip. Here the clips are copied as they lie into (N, T, H, W, C) memory (in shared memory in a
    worker, as default_collate does) and the batch is its (N, C, T, H, W) view.
    """
    first = column[0]
    order = sorted(range(first.dim()), key=lambda d: -first.stride(d))  # dimensions, outermost first
    if order == list(range(first.dim())) or any(t.stride() != first.stride() for t in column):
        return default_collate(column)
    stacked = default_collate([t.permute(order) for t in column])
    back = [0] * first.dim()
    for position, d in enumerate(order):
        back[d] = position + 1
    return stacked.permute(0, *back)


def collate(items: list[Any]) -> Any:
    """default_collate (tensors stacked in their memory order), unless an item failed: then the batch
    is that failure."""
    for item in items:
        if isinstance(item, WorkerFailure):
            return item
    if isinstance(items[0], tuple):
        columns = list(zip(*items, strict=True))
        return tuple(
            stack_in_memory_order(list(c)) if isinstance(c[0], torch.Tensor) else default_collate(list(c))
            for c in columns
        )
    return default_collate(items)


def init_worker(worker_id: int) -> None:
    """In each worker process: one torch thread, so N workers use N cores; glibc keeps freed buffers.

    A clip's buffers (decoded frames, its pathways) are megabytes each, which glibc would
    map and unmap per item (measured for SlowFast 4x16 clips at 340x256: 4,800 page faults and
    68 ms of CPU a clip, 430 and 56 ms tuned). The trainer's own process is tuned by its parameter-server
    node, and forked workers inherit that; this also covers a worker started another way
    (CLIPFLOW_PS_MALLOC_TUNE=0 turns it off here too).
    """
    torch.set_num_threads(1)
    if read_env().ps_malloc_tune:
        from clipflow.ps.transport import tune_malloc

        tune_malloc()


class ClipLoader(DataLoader):
    """A DataLoader that raises a worker's ClipflowError with its own message."""

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if isinstance(batch, WorkerFailure):
                raise ClipflowError(batch.message)
            yield batch


def pins(device: str | torch.device | None) -> bool:
    """Whether batches for ``device`` are worth pinning: only for a CUDA device."""
    return device is not None and torch.device(device).type == "cuda"


def make_loader(
    dataset: Dataset,
    batch_size: int,
    sampler: Sampler | None = None,
    workers: int = 0,
    prefetch: int = 2,
    drop_last: bool = True,
    device: str | torch.device | None = None,
    persistent: bool = True,
    batches: Sampler | None = None,
) -> DataLoader:
    """A DataLoader of ``dataset`` in batches of ``batch_size``, in the order of ``sampler`` (else 0, 1, ...).

    workers: 0 loads in this process; N > 0 starts N worker processes (one torch thread each), which
    stay for the loader's life when ``persistent`` (the epoch travels with each index, see the module);
    ``auto`` (the recipe's train.loader_workers unsized: evaluation, prediction) is 0 here, training sizes it
    first (clipflow.train.loader_sizing). prefetch: batches each worker loads ahead (workers > 0 only; ``auto``:
    2). device: where the batches go; a CUDA device turns on pinned memory. Iterate the loader once per epoch,
    after ``dataset.set_epoch``. batches: a sampler of whole batches (lists of keys) in place of ``sampler``,
    their sizes its own (multigrid's steps: clipflow.train.multigrid).
    """
    workers = 0 if workers == AUTO else workers  # nothing measured here: in this process
    prefetch = DEFAULT_PREFETCH if prefetch == AUTO else prefetch
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ClipflowError(f"train.loader_workers must be auto or an integer >= 0, got {workers!r}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise ClipflowError(f"loader prefetch must be an integer >= 1 (batches per worker), got {prefetch!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ClipflowError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    generator = torch.Generator().manual_seed(0)  # the workers' base seed, off the training process's stream
    if batches is not None:
        sampling: dict[str, Any] = {"batch_sampler": batches}
    else:
        sampling = {"batch_size": batch_size, "sampler": sampler, "drop_last": drop_last}
    if workers == 0:
        return ClipLoader(
            dataset,
            **sampling,
            collate_fn=collate,
            pin_memory=pins(device),
            generator=generator,
        )
    if not hasattr(dataset, "epoch") or not hasattr(dataset, "set_epoch"):
        raise ClipflowError(
            f"{type(dataset).__name__} has no epoch / set_epoch: the loader cannot give workers its epoch"
        )
    if batches is not None:
        sampling = {"batch_sampler": EpochBatches(batches, dataset)}
    else:
        order = sampler if sampler is not None else range(len(dataset) if isinstance(dataset, Sized) else 0)
        sampling = {"batch_size": batch_size, "sampler": EpochIndices(order, dataset), "drop_last": drop_last}
    return ClipLoader(
        AtEpoch(dataset),
        **sampling,
        num_workers=workers,
        collate_fn=collate,
        pin_memory=pins(device),
        worker_init_fn=init_worker,
        prefetch_factor=prefetch,
        persistent_workers=persistent,
        generator=generator,
    )
