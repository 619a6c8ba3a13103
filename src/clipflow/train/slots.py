"""Micro-batch slots: what every worker trains in each step of an epoch, and how a resumed run with another
worker count (a resize) goes on with the same epoch.

Accumulation. With the recipe's ``train.accumulate`` k, each of the W workers runs k micro-batches of
``batch_size`` b per optimizer step, forward and backward each (BatchNorm sees b clips, as a worker without
accumulation does), its gradients summed locally and synchronized once per step (clipflow.train.ps_sync and
ddp_sync: ``no_sync`` for the first k - 1). The step's gradient is the mean over the global batch W x b x k:
each micro-batch's loss is the mean over its b clips, the W x k of them are summed and the optimizer's
``rescale_grad`` is 1 / (W x k). The linear scaling rule uses W x b x k.

Slots. S = W x k micro-batch lanes; slot j = r x k + m is worker r's micro-batch m. Worker r's list holds its
k slots' parts one after another, L entries each (clipflow.data.splits.split_slots). In an epoch, slot j
trains its part in ``epoch_order(L, seed, epoch)`` (the first L // b x b of it), b per micro-batch: L // b
steps. A sample is (source, key): the slot part it comes from and its place there; its random crop and
offsets are drawn from (seed, epoch, key), so a sample is the same clip whichever worker loads it. 2 workers
x k = 2 train exactly the micro-batches of 4 workers x k = 1, step for step. Each slot also keeps its own
BatchNorm running statistics (:class:`SlotBuffers`): a worker's slot 0 sees what worker 0 of the wider run
sees.

Resize. A checkpoint records its layout (W, b, k) and, inside an epoch, every slot's remaining samples of
that epoch and the entries of the parts they come from (:meth:`EpochPlan.record`). A run resumed with W'
workers at batch b' (:func:`decide`): with ``global_batch: keep``, k' = W b k / (W' b') must be a whole
number, else the resume is refused naming the worker counts that would work; with ``scale``, k' is the
recipe's accumulate and the learning rate follows the linear rule for W' b' k'. If S' = W' k' equals S, every
slot keeps its remaining samples and the run goes on as the unbroken one. Otherwise the epoch's remaining
samples, every old slot's in order, are split over the S' new slots as evenly as possible (:func:`spread`),
none repeated or skipped; a slot with fewer samples pads its last micro-batch with samples of weight 0 so
every worker does the same number of steps. The gradient of a step is then exactly the mean-weighted sum of
its real samples (each 1 / (W' b' k')); BatchNorm's batch statistics and running statistics do see the
padding. Later epochs use the new worker lists' slots. A moved sample's video is read from the root every
worker shares; on hosts with their own disks (staged data) a resize inside an epoch is refused for now.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clipflow.data.listfile import VideoEntry, list_text, parse_line
from clipflow.data.splits import epoch_order
from clipflow.errors import ClipflowError
from clipflow.files import append_whole

if TYPE_CHECKING:  # torch is imported where a worker needs it: the launcher reads layouts without it
    import torch

Sample = tuple[int, int]  # (source part, key: the sample's place in that part)


@dataclass(frozen=True)
class Layout:
    workers: int
    batch: int
    accumulate: int

    @property
    def slots(self) -> int:
        return self.workers * self.accumulate

    @property
    def global_batch(self) -> int:
        return self.workers * self.batch * self.accumulate

    def describe(self) -> str:
        return f"{self.workers} workers x {self.batch} clips x {self.accumulate}"

    def record(self) -> dict:
        return {"workers": self.workers, "batch": self.batch, "accumulate": self.accumulate}

    @classmethod
    def of(cls, record: dict) -> Layout:
        return cls(int(record["workers"]), int(record["batch"]), int(record["accumulate"]))


def working_counts(global_batch: int, batch: int) -> list[int]:
    """The worker counts W' for which ``global_batch`` = W' x ``batch`` x k' with a whole k' >= 1."""
    if global_batch % batch:
        return []
    per = global_batch // batch
    return [w for w in range(1, per + 1) if per % w == 0]


def decide(old: Layout, workers: int, batch: int, accumulate: int, policy: str) -> Layout:
    """The layout a run resumed from a checkpoint of layout ``old`` trains with: ``workers`` x ``batch``, and k
    by ``policy`` (keep: the old global batch; scale: the recipe's ``accumulate``)."""
    if policy == "scale":
        return Layout(workers, batch, accumulate)
    per_step = workers * batch
    if old.global_batch % per_step:
        counts = working_counts(old.global_batch, batch)
        which = (f"workers {', '.join(map(str, counts))} would" if counts
                 else f"no worker count does (it is no multiple of batch {batch})")  # fmt: skip
        raise ClipflowError(
            f"global_batch keep: the checkpoint's global batch {old.global_batch} ({old.describe()}) is no whole "
            f"multiple of {workers} workers x {batch} clips; at batch_size {batch} {which}; "
            "or set train.global_batch: scale"
        )
    return Layout(workers, batch, old.global_batch // per_step)


def spread(lanes: list[list[Sample]], slots: int) -> list[list[Sample]]:
    """Every sample of ``lanes``, in order, split over ``slots`` lanes as evenly as possible (the first ones one
    longer)."""
    flat = [s for lane in lanes for s in lane]
    size, extra = divmod(len(flat), slots)
    out, at = [], 0
    for j in range(slots):
        n = size + (1 if j < extra else 0)
        out.append(flat[at : at + n])
        at += n
    return out


def normal_lanes(slots: int, part_length: int, batch: int, seed: int, epoch: int) -> list[list[Sample]]:
    """A whole epoch's samples per slot: its part in epoch_order, the first part_length // batch x batch."""
    order = epoch_order(part_length, seed, epoch)[: (part_length // batch) * batch].tolist()
    return [[(j, key) for key in order] for j in range(slots)]


@dataclass
class EpochPlan:
    """Every slot's samples of (the rest of) an epoch, from step ``first`` on; ``sources``: the entries of the
    parts the samples come from, as list lines (None where the launching host cannot read every worker list);
    ``total``: the epoch's training samples, for the schedule's position in it."""

    lanes: list[list[Sample]]
    sources: list[list[str]] | None
    total: int
    first: int = 0

    def steps(self, batch: int) -> int:
        """Steps left: the longest lane's micro-batches (the others pad)."""
        return max((math.ceil(len(lane) / batch) for lane in self.lanes), default=0)

    def remaining(self, taken: int) -> list[list[Sample]]:
        """Every lane after its first ``taken`` samples."""
        return [lane[taken:] for lane in self.lanes]

    def record(self, taken: int) -> dict:
        """What a checkpoint keeps once every lane's next ``taken`` samples are trained (lists, for torch.load with
        weights_only)."""
        return {"lanes": [[list(s) for s in lane] for lane in self.remaining(taken)], "sources": self.sources,
                "total": self.total}  # fmt: skip

    @classmethod
    def from_record(cls, record: dict, first: int) -> EpochPlan:
        lanes = [[(int(s), int(k)) for s, k in lane] for lane in record["lanes"]]
        return cls(lanes, record["sources"], int(record["total"]), first)

    def encode(self) -> torch.Tensor:
        """This plan for a broadcast: its JSON deflated (a Kinetics-scale plan names its parts' paths: tens of MB of
        text, a few of it deflated), three bytes to each float32 (integers below 2^24 are exact there, on every
        back end's wire)."""
        import numpy as np
        import torch

        text = json.dumps({"lanes": self.lanes, "sources": self.sources, "total": self.total, "first": self.first})
        blob = zlib.compress(text.encode(), 6)
        triples = np.frombuffer(blob + bytes(-len(blob) % 3), np.uint8).reshape(-1, 3).astype(np.uint32)
        return torch.from_numpy(((triples[:, 0] << 16) | (triples[:, 1] << 8) | triples[:, 2]).astype(np.float32))

    @classmethod
    def decode(cls, data: torch.Tensor) -> EpochPlan:
        """The plan :meth:`encode` sent (the deflated stream's padding ignored)."""
        import numpy as np

        words = data.detach().cpu().numpy().astype(np.uint32)
        blob = np.stack([(words >> 16) & 255, (words >> 8) & 255, words & 255], axis=1).astype(np.uint8).tobytes()
        raw = json.loads(zlib.decompressobj().decompress(blob))
        return cls([[(s, k) for s, k in lane] for lane in raw["lanes"]], raw["sources"], raw["total"], raw["first"])

    def trained_fraction(self, batch: int) -> float:
        """The share of the epoch's samples trained before this plan's first step."""
        left = sum(len(lane) for lane in self.lanes)
        return (self.total - left) / self.total if self.total else 1.0


def own_indices(plan: EpochPlan, rank: int, accumulate: int, own_parts: list[list[str]],
                part_length: int) -> list[list[int | None]]:  # fmt: skip
    """Worker ``rank``'s lanes of ``plan`` as indices into its own dataset (part ``m``'s sample ``key`` at
    ``m x part_length + key``), None for a sample that is not of its own parts (another worker's part, or a part
    the plan names otherwise). Each part is compared with the plan's once, not once a sample: linear in the
    samples (per sample, the work grew with the square of the list: minutes an epoch at Kinetics' size)."""
    k, sources = accumulate, plan.sources
    same = [sources is None or (rank * k + m < len(sources) and sources[rank * k + m] == own_parts[m])
            for m in range(k)]  # fmt: skip

    def own(sample: Sample) -> int | None:
        source, key = sample
        m = source - rank * k
        if not 0 <= m < k or key >= part_length or not same[m]:
            return None
        return m * part_length + key

    return [[own(s) for s in lane] for lane in plan.lanes[rank * k : (rank + 1) * k]]


def part_lines(entries: list[VideoEntry], accumulate: int, length: int) -> list[list[str]]:
    """A worker list's ``accumulate`` slot parts of ``length`` entries, as list lines."""
    return [list_text(entries[m * length : (m + 1) * length]).splitlines() for m in range(accumulate)]


def entry_of(line: str, where: str) -> VideoEntry:
    return parse_line(line, where)


def schedule_point(epoch: int, iters: int, start: int, done: int, left: int) -> int:
    """The schedule's iteration of a step: ``epoch`` has ``iters`` steps in this layout; the plan began at its
    step ``start`` (the trained share of the epoch in this layout's steps) with ``left`` steps to go, of which
    ``done`` are done. Without a resize ``start + left`` is ``iters`` and this is the unbroken run's count."""
    return (epoch - 1) * iters + start + (done * max(iters - start, 0)) // max(left, 1)


class SlotBuffers:
    """Each of a worker's k slots keeps its own BatchNorm running statistics: :meth:`use` puts slot m's into the
    model before its micro-batch; after the step slot 0's are back (what checkpoints and validation see)."""

    def __init__(self, model: torch.nn.Module, accumulate: int) -> None:
        import torch

        self._no_grad = torch.no_grad  # use() runs every micro-batch: no import statement there
        self.buffers = [b for b in model.buffers()]
        self.kept = [[b.detach().clone() for b in self.buffers] for _ in range(accumulate)] if accumulate > 1 else []
        self.current = 0

    def use(self, slot: int) -> None:
        if not self.kept or slot == self.current:
            return
        with self._no_grad():
            for b, keep in zip(self.buffers, self.kept[self.current], strict=True):
                keep.copy_(b)
            for b, mine in zip(self.buffers, self.kept[slot], strict=True):
                b.copy_(mine)
        self.current = slot

    def reset(self) -> None:
        """Every slot takes the model's statistics (after precise BN, clipflow.train.precise_bn: as a resumed run's
        slots all start from rank 0's)."""
        with self._no_grad():
            for keep in self.kept:
                for b, mine in zip(self.buffers, keep, strict=True):
                    mine.copy_(b)


class LaneSampler:
    """A worker's dataset indices for the steps of an epoch plan: per step, each of its k lanes' next micro-batch
    of ``batch`` in turn; a lane with fewer samples left pads with its first sample (weight 0 in the step). A
    DataLoader's sampler (any sized iterable of indices)."""

    def __init__(self) -> None:
        self.lanes: list[list[int]] = []
        self.batch, self.steps, self.pad = 1, 0, 0

    def set(self, lanes: list[list[int]], batch: int, steps: int, pad: int) -> None:
        self.lanes, self.batch, self.steps, self.pad = lanes, batch, steps, pad

    def __iter__(self) -> Iterator[int]:
        b = self.batch
        for s in range(self.steps):
            for lane in self.lanes:
                chunk = lane[s * b : (s + 1) * b]
                yield from chunk + [lane[0] if lane else self.pad] * (b - len(chunk))

    def __len__(self) -> int:
        return self.steps * len(self.lanes) * self.batch


class ShapedBatches:
    """A worker's multigrid steps of an epoch plan (one lane: multigrid does not accumulate): per step, its lane's
    next samples, as many as that step's batch, each keyed with the step's clip shape (clipflow.data.dataset's
    (index, ClipShape) items). A DataLoader's batch sampler."""

    def __init__(self) -> None:
        self.lane: list[int] = []
        self.steps: list[tuple[int, object]] = []  # (batch, shape) per step

    def set(self, lane: list[int], steps: list[tuple[int, object]]) -> None:
        self.lane, self.steps = lane, steps

    def __iter__(self) -> Iterator[list[tuple[int, object]]]:
        at = 0
        for size, shape in self.steps:
            yield [(index, shape) for index in self.lane[at : at + size]]
            at += size

    def __len__(self) -> int:
        return len(self.steps)


class SampleLog:
    """CLIPFLOW_SAMPLE_LOG: worker ``rank`` appends one tab-separated line per trained sample after each optimizer
    step to ``folder``/worker{rank}.tsv: attempt (rank 0's start time in ms, the same on every worker), epoch,
    step (0-based, counted over the run), slot, the entry's path, weight (0 for padding)."""

    def __init__(self, folder: Path | None, rank: int, attempt: int) -> None:
        self.path = None if folder is None else folder / f"worker{rank}.tsv"
        self.attempt = attempt
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, epoch: int, step: int, rows: list[tuple[int, str, float]]) -> None:
        if self.path is None:
            return
        text = "".join(f"{self.attempt}\t{epoch}\t{step}\t{slot}\t{path}\t{w:g}\n" for slot, path, w in rows)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:  # a full disk leaves no cut line: the next step's rows start on a line of their own
            append_whole(fd, self.path, text.encode())
        finally:
            os.close(fd)
