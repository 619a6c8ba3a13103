"""How many loader processes a training worker runs, how far ahead they load, and with how many decoder threads
(``train.loader_workers`` and ``train.loader_prefetch``; :func:`size_loader`, the choice a :class:`LoaderChoice`).

Given numbers are used as given: ``loader_workers: N`` starts N loader processes (0: clips decoded in the training
process), ``loader_prefetch: P`` keeps P batches ahead in each (``auto``: 2).

``loader_workers: auto`` (the default) measures, in each training worker's own process at its start, on its own
training list (its dataset, its torch threads):

- decode: a batch of its own items loaded in this process as a loader process loads them (read, decode, crop,
  stack: ``collate``; on one torch thread), one batch untimed (file cache, allocator), then :data:`TIMED_BATCHES`
  timed, their mean;
- step: one forward and backward pass of the recipe's model at the per-worker batch
  (:func:`clipflow.models.step_timing.time_step`, the link check's own timing: a model of its own, built from the
  recipe, on random clips of the recipe's shape, one untimed pass then the median of the next two, within
  :data:`STEP_BOUND_S`). The gradient exchange and the update are not in it, so the step it gives is shorter than
  training's: the loader comes out larger, never smaller. The link check's figure, where one ran, is not reused:
  it is the launching node's at all its cores, and the training job does not carry it.

Neither touches training: the trainer's model (its weights, BatchNorm's running statistics, its gradients) and
optimizer are not used, the items are read at the dataset's current epoch without changing it (an item is a
function of seed, epoch and index: clipflow.data.loader), and every random generator (torch's, CUDA's, numpy's,
Python's) is put back as it was, so a run trains the same weights as one given the same numbers.

The rule (:func:`choose`), from decode ``d`` and step ``s`` seconds a batch:

- ``d / (d + s)`` under :data:`NEGLIGIBLE` (a worker decoding in-process would wait at most that share of its time):
  0 loader processes, the clips decoded in the training process;
- else ``ceil(MARGIN x d / s)`` loader processes, so that they decode a batch in at most 1 / :data:`MARGIN` of a
  step (a loader process shares the cores with training, and videos differ), at least 1 and at most this worker's
  cores: the CPUs this process may run on (``os.sched_getaffinity``) divided by the training workers on the host
  (CLIPFLOW_WORKERS_ON_HOST, as the worker's torch threads divide them: clipflow.train.worker). The training
  process's own threads are not taken off: while it waits for a batch its cores are free, and on a host with as
  many workers as cores that would leave none where waiting costs most. Capped, the processes cannot keep up
  and the worker waits (the report shows how much): fewer workers per host, or more cores, are the way out;
- prefetch ``ceil(2 x r) + 1`` between 2 and :data:`MAX_PREFETCH`, ``r = d / (n x s)`` the share of its time a
  loader process spends decoding: 2 when they are idle half the time or more, deeper as they near their limit so
  that a slow video's batch is absorbed; each batch ahead is memory (shared) per process;
- decoder threads 1: the readers decode each video on one thread (clipflow.data.reader), and the parallelism is
  the loader processes', whole clips side by side: a threaded decoder's extra threads would compete with the
  training's on the same cores and, frame-threaded, hold back frames for a short clip's few reads.

A multigrid run (clipflow.train.multigrid) takes other batches stage by stage at about the recipe's step's cost:
each epoch's loader is the rule's for the epoch's clips a step (their mean over its steps), decoding taken to grow
with the clips (a clip is decoded over its whole span whatever its shape) and the step to stay
(:func:`for_clips`); the trainer starts a new loader where that choice changes, and each epoch's record carries its
own.

Where ``auto`` reaches a loader that is not the training's (evaluation, prediction: there is no step to measure
against), it means 0 processes and prefetch 2 (clipflow.data.loader.make_loader).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from clipflow.errors import ClipflowError

NEGLIGIBLE = 0.05  # decoding under 5% of decode + step: in the training process
MARGIN = 2.0  # loader processes decode a batch in at most half a step
MAX_PREFETCH = 4
DECODE_THREADS = 1
TIMED_BATCHES = 2  # after one untimed batch
STEP_BOUND_S = 20.0  # time_step's bound: one untimed pass, then timed ones while it lasts


@dataclass(frozen=True)
class LoaderChoice:
    """A training worker's loader: ``workers`` processes (0: in the training process), ``prefetch`` batches ahead in
    each, ``decode_threads`` per reader; ``auto`` when sized here from ``decode_s`` (a batch of ``batch`` decoded
    in-process) and ``step_s`` (a forward and backward pass), else the recipe's numbers (those two then None);
    ``cores``: the cores the processes were capped at (0: not sized)."""

    workers: int
    prefetch: int
    decode_threads: int = DECODE_THREADS
    auto: bool = False
    decode_s: float | None = None
    step_s: float | None = None
    batch: int = 0
    cores: int = 0

    @property
    def capped(self) -> bool:
        """Whether the cores held the processes below what the rule wanted."""
        return self.auto and self.workers == self.cores and self.workers < wanted_workers(self.decode_s, self.step_s)

    @property
    def measured(self) -> bool:
        return self.auto and self.decode_s is not None and self.step_s is not None

    def describe(self) -> str:
        """One line, e.g. ``decode 52 ms a batch of 8, step 180 ms: 1 loader process, prefetch 2, 1 decode thread
        (auto)``."""
        threads = f"{self.decode_threads} decode thread{'s' if self.decode_threads != 1 else ''}"
        cap = f" (capped at this worker's {self.cores} core{'s' if self.cores != 1 else ''})" if self.capped else ""
        if self.workers:
            what = f"{self.workers} loader process{'es' if self.workers != 1 else ''}{cap}, prefetch {self.prefetch}"
        else:
            what = "in the training process"
        if not self.measured:
            return f"{what}, {threads} (train.loader_workers {self.workers}, as given)"
        measured = f"decode {1000 * self.decode_s:.0f} ms a batch of {self.batch}, step {1000 * self.step_s:.0f} ms"
        if not self.workers:
            share = self.decode_s / (self.decode_s + self.step_s) if self.decode_s + self.step_s > 0 else 0.0
            return f"{measured}: {what} ({100 * share:.0f}% of the two), {threads} (auto)"
        return f"{measured}: {what}, {threads} (auto)"

    def record(self) -> dict[str, Any]:
        """As the training history keeps it (each worker's ``loader`` in an epoch's ``workers``)."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LoaderChoice:
        """A :meth:`record` read back (the report); a key it lacks takes its default."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})

    # as numbers, for the trainer's collective sum of every worker's row (float32: whole numbers and ms exact enough)
    WORDS = 8

    def words(self) -> list[float]:
        return [float(self.workers), float(self.prefetch), float(self.decode_threads), float(self.auto),
                -1.0 if self.decode_s is None else self.decode_s, -1.0 if self.step_s is None else self.step_s,
                float(self.batch), float(self.cores)]  # fmt: skip

    @classmethod
    def from_words(cls, words: list[float]) -> LoaderChoice:
        workers, prefetch, threads, auto, decode_s, step_s, batch, cores = words
        return cls(round(workers), round(prefetch), round(threads), bool(auto),
                   None if decode_s < 0 else float(decode_s), None if step_s < 0 else float(step_s),
                   round(batch), round(cores))  # fmt: skip


def wanted_workers(decode_s: float | None, step_s: float | None) -> int:
    """The rule's loader processes before the cores' cap: 0 when decoding is a negligible share (or was not
    measured), else enough to decode a batch in 1 / MARGIN of a step."""
    if decode_s is None or step_s is None or decode_s <= 0:
        return 0
    step_s = max(step_s, 1e-9)
    if decode_s / (decode_s + step_s) < NEGLIGIBLE:
        return 0
    return max(1, math.ceil(MARGIN * decode_s / step_s))


def choose(decode_s: float, step_s: float, batch: int, cores: int) -> LoaderChoice:
    """The rule (see the module) for a batch of ``batch`` decoded in ``decode_s`` and a step of ``step_s`` seconds,
    with ``cores`` for this worker."""
    from clipflow.data.loader import DEFAULT_PREFETCH

    cores = max(1, cores)
    workers = min(wanted_workers(decode_s, step_s), cores)
    prefetch = DEFAULT_PREFETCH
    if workers:
        busy = decode_s / (workers * max(step_s, 1e-9))  # the share of its time a loader process decodes
        prefetch = min(MAX_PREFETCH, max(DEFAULT_PREFETCH, math.ceil(2 * busy) + 1))
    return LoaderChoice(workers, prefetch, DECODE_THREADS, True, decode_s, step_s, batch, cores)


def worker_cores(workers_on_host: int | None = None) -> int:
    """The cores this training worker may use: the CPUs this process may run on over the training workers on its
    host (CLIPFLOW_WORKERS_ON_HOST), at least 1."""
    if workers_on_host is None:
        from clipflow.environment import read_env

        workers_on_host = read_env().workers_on_host
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, workers_on_host))


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """Every random generator training draws from (torch's, the current CUDA device's, numpy's, Python's) as it was
    before the block."""
    import numpy as np
    import torch

    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    numpy_state, python_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """The block on one torch thread, as a loader process runs (clipflow.data.loader.init_worker)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def measure_decode(dataset: Any, batch: int) -> float:
    """Seconds to load a batch of ``batch`` of ``dataset``'s items in this process (items and their stack, as a
    loader process makes a batch): one batch untimed, then the mean of :data:`TIMED_BATCHES`. The items are the
    first of the dataset (again from the start when it has fewer), at its current epoch."""
    from clipflow.data.loader import collate

    size = len(dataset)
    if size == 0:
        raise ClipflowError("the training list is empty: nothing to measure the loader on")

    def load(first: int) -> None:  # a video that cannot be read fails here as it would in training, named
        collate([dataset[(first + i) % size] for i in range(batch)])

    load(0)
    began = time.perf_counter()
    for b in range(1, TIMED_BATCHES + 1):
        load(b * batch)
    return (time.perf_counter() - began) / TIMED_BATCHES


def measure_step(recipe: dict) -> float:
    """Seconds of a forward and backward pass at the recipe's per-worker batch (clipflow.models.step_timing's
    time_step: a model of its own, random clips; it draws from the random generators, which the caller keeps)."""
    from clipflow.models.step_timing import time_step

    return time_step(recipe, STEP_BOUND_S)


def for_clips(measured: LoaderChoice, clips: float, prefetch: int | str) -> LoaderChoice:
    """The rule's choice for steps of ``clips`` clips a worker (a multigrid epoch's mean), from ``measured`` (a
    batch of ``measured.batch``): decoding scaled by the clips, the step as measured; a given ``prefetch``
    (train.loader_prefetch) kept. A choice not measured (the recipe's numbers) is kept as it is."""
    from clipflow.data.loader import AUTO

    if not measured.measured or not measured.batch:
        return measured
    chosen = choose(measured.decode_s * clips / measured.batch, measured.step_s, round(clips), measured.cores)
    return chosen if prefetch == AUTO else replace(chosen, prefetch=prefetch)


def size_loader(train: dict, dataset: Any, recipe: dict, cores: int | None = None) -> LoaderChoice:
    """A training worker's loader for the recipe's ``train`` settings (``loader_workers``, ``loader_prefetch``):
    the given numbers, or with ``auto`` measured on ``dataset`` (the worker's training items) and ``recipe``'s model
    and chosen by :func:`choose`; a given prefetch is kept either way."""
    from clipflow.data.loader import AUTO, DEFAULT_PREFETCH

    workers, prefetch = train.get("loader_workers", 0), train.get("loader_prefetch", DEFAULT_PREFETCH)
    batch = train["batch_size"]
    if workers != AUTO:
        return LoaderChoice(workers, DEFAULT_PREFETCH if prefetch == AUTO else prefetch)
    import torch

    with random_state_kept(), torch.no_grad(), one_torch_thread():
        decode_s = measure_decode(dataset, batch)
    with random_state_kept():
        step_s = measure_step(recipe)
    chosen = choose(decode_s, step_s, batch, worker_cores() if cores is None else cores)
    if prefetch != AUTO:
        chosen = LoaderChoice(chosen.workers, prefetch, chosen.decode_threads, True, decode_s, step_s, batch,
                              chosen.cores)  # fmt: skip
    return chosen
