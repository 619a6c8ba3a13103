"""Gradient buckets and the optimizer's update on them, shared by both back ends (PSSync and DDPSync).

A bucket is a group of parameters of about ``bucket_bytes`` (float32) flattened into one
vector: one parameter-server key, one all-reduce. Buckets are made in reverse registration
order, the order backward usually produces gradients, and parameters with different weight
decay multipliers (``wd_mult``: 0 for biases and BatchNorm with ``--no-wd``) never share one,
so a multiplier is per bucket. Both back ends update the weights with the same
optimizer of :mod:`clipflow.ps.optimizer` (SGD or Adam) keyed by the bucket's key, so their
updates are bit for bit the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from clipflow.errors import ClipflowError
from clipflow.ps.optimizer import Optimizer

KEY_BASE = 1_000_000  # above the trainer's own keys on the parameter server
DEFAULT_BUCKET_BYTES = 2 << 20  # 2 MiB

WdMult = Callable[[str, torch.nn.Parameter], float] | Mapping[str, float] | None


@dataclass
class Bucket:
    key: int
    wd_mult: float
    params: list[torch.nn.Parameter] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    numel: int = 0
    buffer: torch.Tensor | None = None  # the flat float32 vector the back end communicates

    def add(self, p: torch.nn.Parameter) -> None:
        self.params.append(p)
        self.offsets.append(self.numel)
        self.numel += p.numel()

    def slices(self) -> Iterable[tuple[torch.nn.Parameter, slice]]:
        for p, o in zip(self.params, self.offsets, strict=True):
            yield p, slice(o, o + p.numel())

    def gather_grads(self) -> None:
        """Copy the parameters' gradients into ``buffer`` (a missing gradient counts as zeros)."""
        assert self.buffer is not None
        with torch.no_grad():
            for p, s in self.slices():
                if p.grad is None:
                    self.buffer[s].zero_()
                else:
                    self.buffer[s].copy_(p.grad.detach().reshape(-1))

    def scatter_grads(self) -> None:
        """Write ``buffer`` into the parameters' gradients."""
        assert self.buffer is not None
        with torch.no_grad():
            for p, s in self.slices():
                merged = self.buffer[s].view_as(p)
                if p.grad is None:
                    p.grad = merged.to(device=p.device, dtype=p.dtype, copy=True)
                else:
                    p.grad.copy_(merged)

    def scatter_weights(self) -> None:
        """Write ``buffer`` into the parameters."""
        assert self.buffer is not None
        with torch.no_grad():
            for p, s in self.slices():
                p.copy_(self.buffer[s].view_as(p))


def trainable(model: torch.nn.Module | Iterable[torch.nn.Parameter], who: str) -> list[tuple[str, torch.nn.Parameter]]:
    """(name, parameter) of every parameter that requires a gradient; names are indices for a plain iterable."""
    named = (
        list(model.named_parameters())
        if isinstance(model, torch.nn.Module)
        else [(str(i), p) for i, p in enumerate(model)]
    )
    named = [(n, p) for n, p in named if p.requires_grad]
    if not named:
        raise ClipflowError(f"{who} needs at least one parameter that requires a gradient")
    return named


def make_buckets(
    named: list[tuple[str, torch.nn.Parameter]], wd_mult: WdMult, bucket_bytes: int, key_base: int
) -> list[Bucket]:
    """Buckets in reverse registration order, one open bucket per weight decay multiplier."""
    if bucket_bytes < 1:
        raise ClipflowError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[Bucket] = []
    open_: dict[float, Bucket] = {}
    for name, p in reversed(named):
        if wd_mult is None:
            mult = 1.0
        elif callable(wd_mult):
            mult = float(wd_mult(name, p))
        else:
            mult = float(wd_mult.get(name, 1.0))
        bucket = open_.get(mult)
        if bucket is None:
            bucket = open_[mult] = Bucket(key_base + len(buckets), mult)
            buckets.append(bucket)
        bucket.add(p)
        if bucket.numel * 4 >= bucket_bytes:
            del open_[mult]
    return buckets


def optimizer_step(optimizer: Optimizer, buckets: list[Bucket]) -> None:
    """One update of every bucket's parameters from their ``p.grad`` (float32, on the CPU)."""
    for b in buckets:
        weight = np.empty(b.numel, dtype=np.float32)
        grad = np.zeros(b.numel, dtype=np.float32)
        for p, s in b.slices():
            weight[s] = p.detach().reshape(-1).cpu().numpy()
            if p.grad is not None:
                grad[s] = p.grad.detach().reshape(-1).cpu().numpy()
        optimizer.update(b.key, weight, grad)
        with torch.no_grad():
            for p, s in b.slices():
                p.copy_(torch.from_numpy(weight[s]).view_as(p))
