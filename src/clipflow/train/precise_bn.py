"""Precise BatchNorm statistics: every BatchNorm layer's running mean and variance recomputed over training batches
with the weights frozen, summed over all workers (the recipe's ``train.precise_bn_batches``; PySlowFast's
``BN.USE_PRECISE_STATS`` with ``NUM_BATCHES_PRECISE``).

During training a BatchNorm layer's running statistics are an exponential average over batches seen by weights
that kept changing; validation and the final model then normalise with statistics of no network that exists.
:func:`recompute` replaces them with the population statistics of the network as it is now:

* **What runs.** ``forward(*inputs)`` on each of up to ``limit`` batches of ``batches`` (this worker's own; the
  count is per worker, as PySlowFast's ``NUM_BATCHES_PRECISE`` is per process: W workers see W x ``limit``
  batches). Under ``torch.no_grad()``: no gradient, no optimizer step, the weights never change. The model is in
  eval mode but for its BatchNorm layers, which are in train mode: each normalises with its batch's statistics,
  as in training, so a layer sees the activations training gives it (dropout and any other train-only behaviour
  off). Each layer's momentum is 0 meanwhile, so the passes leave its running statistics as they were; its
  ``num_batches_tracked`` is put back too. Afterwards every module's mode and every layer's momentum are
  restored, also when a batch fails (the running statistics then unchanged).
* **What is measured.** A forward pre-hook on each layer (``torch.nn.modules.batchnorm._BatchNorm`` that tracks
  running statistics) takes its input x (N, C, ...), and per batch, per channel, the mean and the biased variance
  over the batch's N x S elements (S: the elements per clip and channel, the same in every batch: fixed crops).
  Per layer a worker sums in float64 ``N * mean``, ``N * var`` and ``N * mean**2`` and counts N, so a last batch
  of fewer clips weighs as many clips as it has.
* **The sum over workers** (``all_sum(name, tensor)``: the trainer's comm, :mod:`clipflow.train.comm`; every worker
  calls :func:`recompute` at the same point) takes two collectives, each one flat tensor for all layers:
  ``precise_bn_mean`` (per layer the sums of ``N * mean`` and of N, and the batches) gives the population mean
  mu; ``precise_bn_var`` then sums each worker's second moment about mu,
  ``sum N * (var + (mean - mu)**2)``, which it computes from its float64 sums. The parameter server carries
  float32: a one-round ``E[x^2] - E[x]^2`` from float32 sums would lose ``2**-24 * mean**2`` to cancellation,
  large next to a small variance; about the common mu nothing cancels, so every value keeps float32's relative
  precision (about 1e-7 per worker summed).
* **What is set.** ``running_mean = mu``; ``running_var`` = the population variance over all workers' n = N x S
  elements, times n / (n - 1): the unbiased estimate, as torch's BatchNorm keeps (its update takes each batch's
  unbiased variance). This is exactly ``torch.var(x, correction=1)`` over every element the layer saw, which a
  test computes directly from the frozen network's activations. PySlowFast's fvcore averages the batches'
  unbiased variances instead, which leaves out the spread of the batch means: the population variance is the
  statistic eval mode should normalise with.

The result depends on the weights and the batches only (the running statistics before are overwritten, never
read), so a run resumed from a checkpoint recomputes what the unbroken run did. A layer no batch reached keeps
its statistics. When no worker has a batch, nothing changes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from clipflow.errors import ClipflowError

AllSum = Callable[[str, torch.Tensor], None]


@dataclass(frozen=True)
class PreciseBN:
    """What :func:`recompute` did: ``batches`` this worker ran (of ``limit`` asked), ``total_batches`` and
    ``clips`` over all workers, ``layers`` whose statistics it set."""

    limit: int
    batches: int
    total_batches: int
    clips: int
    layers: int

    def describe(self, workers: int) -> str:
        """One log line."""
        fewer = f" (train.precise_bn_batches {self.limit}: the loader had only {self.batches})" if (
            self.batches < self.limit) else ""  # fmt: skip
        return (
            f"precise BN: running mean and variance of {self.layers} BatchNorm layers recomputed over "
            f"{self.batches} batches per worker{fewer}, {self.total_batches} over {workers} workers "
            f"({self.clips} clips), weights frozen"
        )


def batch_order(count: int, batch: int, limit: int, key: Sequence[int]) -> list[int]:
    """Dataset indices ``0 .. count - 1`` in an order drawn from ``key`` (the trainer's: the run's seed, the rank,
    the epoch), cut to at most ``limit`` full batches of ``batch``: the clips a worker's precise BN runs. Fewer when
    the list holds fewer (then all its full batches); the same in a resumed run as in the unbroken one."""
    seed = int(np.random.SeedSequence([*key, 0x50424E]).generate_state(1)[0])  # a stream of its own
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return order[: min(limit, count // batch) * batch].tolist()


def bn_layers(model: nn.Module) -> list[_BatchNorm]:
    """The model's BatchNorm layers that keep running statistics, in module order."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats
            and m.running_mean is not None and m.running_var is not None]  # fmt: skip


class _Moments:
    """One layer's float64 sums over this worker's batches: ``N * mean``, ``N * var`` (biased, in the batch),
    ``N * mean**2`` per channel, and N (clips); S, the elements per clip and channel."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mean = self.var = self.square = None
        self.clips = 0
        self.per_clip: int | None = None

    def add(self, x: torch.Tensor) -> None:
        n = x.shape[0]
        per_clip = x[0, 0].numel() if x.dim() > 2 else 1
        if self.per_clip is None:
            self.per_clip = per_clip
        elif per_clip != self.per_clip:
            raise ClipflowError(
                f"precise BN: BatchNorm layer {self.name} got {per_clip} elements per clip and channel, earlier "
                f"{self.per_clip}; its batches must be alike (fixed crops): set train.precise_bn_batches: 0"
            )
        dims = [0, *range(2, x.dim())]
        var, mean = torch.var_mean(x.detach().float(), dim=dims, correction=0)  # two passes: no cancellation
        mean, var = mean.double(), var.double()
        if self.mean is None:
            self.mean, self.var, self.square = n * mean, n * var, n * mean * mean
        else:
            self.mean += n * mean
            self.var += n * var
            self.square += n * mean * mean
        self.clips += n


def recompute(model: nn.Module, batches: Iterable[Sequence[torch.Tensor]], forward: Callable[..., object],
              all_sum: AllSum, limit: int) -> PreciseBN:  # fmt: skip
    """Sets the running mean and variance of ``model``'s BatchNorm layers to the population statistics over up to
    ``limit`` of this worker's ``batches`` (each the inputs ``forward`` takes) and every other worker's (collective:
    every worker calls it); see the module."""
    layers = bn_layers(model)
    if not layers:  # the same model on every worker: none calls the collectives
        return PreciseBN(limit, 0, 0, 0, 0)
    names = {id(m): name for name, m in model.named_modules()}
    moments = [_Moments(names.get(id(m), type(m).__name__)) for m in layers]
    modes = [(m, m.training) for m in model.modules()]
    kept = [(m.momentum, m.num_batches_tracked.clone() if m.num_batches_tracked is not None else None)
            for m in layers]  # fmt: skip
    hooks = [
        m.register_forward_pre_hook(lambda _m, args, acc=acc: acc.add(args[0]))
        for m, acc in zip(layers, moments, strict=True)
    ]
    ran = 0
    try:
        model.eval()
        for m in layers:
            m.train()
            m.momentum = 0.0  # the running statistics stay as they are while the batches run
        with torch.no_grad():
            for inputs in itertools.islice(batches, limit):
                forward(*inputs)
                ran += 1
    finally:
        for hook in hooks:
            hook.remove()
        for m, (momentum, tracked) in zip(layers, kept, strict=True):
            m.momentum = momentum
            if tracked is not None:
                m.num_batches_tracked.copy_(tracked)
        for m, training in modes:
            m.training = training
    return _set(layers, moments, all_sum, limit, ran)


def _set(layers: list[_BatchNorm], moments: list[_Moments], all_sum: AllSum, limit: int, ran: int) -> PreciseBN:
    """The two collectives of the module's description, then the layers' running statistics set. Per layer the
    first also sums S where a worker saw the layer and how many did (S: :class:`_Moments`), so that a worker
    without batches sets what the others do."""
    device = layers[0].running_mean.device  # recompute calls it only with layers

    def row(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float64, device=device)

    first = [torch.cat([acc.mean if acc.mean is not None else torch.zeros(m.num_features, dtype=torch.float64,
                                                                           device=device),
                        row([acc.clips, acc.per_clip or 0, 1 if acc.per_clip else 0])])
             for m, acc in zip(layers, moments, strict=True)]  # fmt: skip
    summed = torch.cat([*first, row([ran])]).float()
    all_sum("precise_bn_mean", summed)
    summed = summed.double()
    at, seen = 0, []  # per layer: (mu, clips, S) over all workers
    for m in layers:
        c = m.num_features
        total, clips, per_clip, saw = summed[at : at + c], *(float(v) for v in summed[at + c : at + c + 3])
        at += c + 3
        seen.append((total / clips if clips else total, round(clips), round(per_clip / saw) if saw else 0))
    total_batches = round(float(summed[at]))
    second = torch.cat([
        acc.var + acc.square - 2 * mu * acc.mean + acc.clips * mu * mu if acc.mean is not None
        else torch.zeros(m.num_features, dtype=torch.float64, device=device)
        for m, acc, (mu, _, _) in zip(layers, moments, seen, strict=True)
    ]).float()  # fmt: skip
    all_sum("precise_bn_var", second)
    second = second.double()
    done, at = 0, 0
    with torch.no_grad():
        for layer, (mu, clips, per_clip) in zip(layers, seen, strict=True):
            m2 = second[at : at + layer.num_features]
            at += layer.num_features
            if not clips:
                continue  # no worker's batch reached it
            elements = clips * per_clip
            var = m2 / clips * (elements / (elements - 1) if elements > 1 else 1.0)
            layer.running_mean.copy_(mu.to(layer.running_mean.dtype))
            layer.running_var.copy_(var.clamp_min(0).to(layer.running_var.dtype))
            done += 1
    clips = max((c for _, c, _ in seen), default=0)
    return PreciseBN(limit, ran, total_batches, clips, done)
