"""Data-parallel gradients over torch.distributed: PSSync's counterpart for the ``ddp`` back end.

::

    sync = DDPSync(model, optimizer={"name": "sgd", "learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4,
                                     "rescale_grad": 1 / world_size})
    for x, y in batches:
        sync.set_learning_rate(schedule(step))
        loss_fn(sync.module(x), y).backward()   # DistributedDataParallel sums buckets during backward
        sync.synchronize()
        sync.step()                             # the optimizer code the parameter server's workers run
        model.zero_grad(set_to_none=True)

The model is wrapped in torch's ``DistributedDataParallel`` (its constructor gives every
process rank 0's weights and buffers), with a communication hook that **sums** the
gradient buckets instead of averaging them: the optimizer's ``rescale_grad`` (1 / world
size) makes the mean, as on the parameter server, so both back ends run the same update on
the same numbers. BatchNorm statistics stay each process's own (``forward_sync_buffers``
off), as on the parameter server. The buckets stay the same from the first step to the last
(``find_unused_parameters``): with 3 or more workers a sum's rounding depends on them, and a resumed run must
sum as the unbroken one did.

With ``clip_norm`` > 0 every process clips its own gradients to that L2 norm before the
sum (GluonCV's ``--clip-grad``, as PSSync does it). That needs all local gradients first, so
the model is not wrapped: :meth:`synchronize` clips, then sums each bucket with one
all-reduce.

The weights are updated by :func:`clipflow.train.buckets.optimizer_step` on buckets made as
PSSync makes them (same keys, same weight decay multipliers): both back ends run the same
update on the same numbers and save their optimizer states in the same form.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from clipflow.errors import ClipflowError
from clipflow.ps.optimizer import create as create_optimizer
from clipflow.train.buckets import DEFAULT_BUCKET_BYTES, KEY_BASE, WdMult, make_buckets, optimizer_step, trainable


def _sum_hook(_state, bucket):  # no annotations: DDP checks them as classes, and here they would be strings
    """DDP communication hook: the plain sum of a ``dist.GradBucket`` over the processes (the default
    hook divides by the world size)."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


# BatchNorm statistics stay each worker's between steps (the trainer broadcasts rank 0's at the start, as the
# parameter server does). torch 2.13 added forward_sync_buffers for this and deprecated broadcast_buffers; a
# cluster's image may hold an older torch, which has only the latter.
_NO_FORWARD_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


class DDPSync:
    """Sums gradients over the torch.distributed group; :meth:`step` runs the optimizer the parameter server's
    workers run."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        optimizer: Mapping[str, Any],
        wd_mult: WdMult = None,
        clip_norm: float = 0.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        device: torch.device | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise ClipflowError("DDPSync needs torch.distributed initialised (clipflow's ddp back end does it)")
        if not clip_norm >= 0:
            raise ClipflowError(f"clip_norm must be >= 0 (0: no clipping), got {clip_norm}")
        self.clip_norm = float(clip_norm)
        self.buckets = make_buckets(trainable(model, "DDPSync"), wd_mult, bucket_bytes, KEY_BASE)
        try:
            self.local = create_optimizer(**dict(optimizer))
        except (TypeError, ValueError) as exc:
            raise ClipflowError(f"optimizer: {exc}") from None
        self.local.set_wd_mult({b.key: b.wd_mult for b in self.buckets if b.wd_mult != 1.0})
        if self.clip_norm:
            self._broadcast_state(model)
            for b in self.buckets:
                b.buffer = torch.zeros(b.numel, dtype=torch.float32, device=b.params[0].device)
            self.module: torch.nn.Module = model
        else:
            on_gpu = device is not None and device.type == "cuda"
            # find_unused_parameters keeps DDP's buckets as made here for the whole process: without it DDP puts
            # every gradient in one bucket for the process's first step and then regroups them by the order they
            # came in. A sum over 3 or more workers rounds by where a value sits in its bucket (gloo's ring), so a
            # run resumed inside an epoch (its first step in the one bucket) drifted from the unbroken run (that
            # step already regrouped). The cost: one walk of the autograd graph and a small all-reduce per step.
            ddp = DistributedDataParallel(model, device_ids=[device] if on_gpu else None,
                                          bucket_cap_mb=bucket_bytes / 2**20, find_unused_parameters=True,
                                          **_NO_FORWARD_BUFFER_SYNC)  # fmt: skip
            ddp.register_comm_hook(None, _sum_hook)
            self.module = ddp

    @staticmethod
    def _broadcast_state(model: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers to every process (what DistributedDataParallel's constructor does)."""
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Forward and backward inside only add into ``p.grad`` (gradient accumulation); the next backward outside
        sums the accumulated gradients once. Without the DDP wrapper (clipping) synchronize() sums them anyway."""
        return self.module.no_sync() if isinstance(self.module, DistributedDataParallel) else contextlib.nullcontext()

    def set_learning_rate(self, lr: float) -> None:
        self.local.learning_rate = float(lr)

    def synchronize(self) -> None:
        """Without clipping, DistributedDataParallel has summed the gradients during backward; with it,
        clip this process's gradients, then sum every bucket."""
        if not self.clip_norm:
            return
        grads = [p for b in self.buckets for p in b.params if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(grads, self.clip_norm)
        works = []
        for b in self.buckets:
            b.gather_grads()
            works.append(dist.all_reduce(b.buffer, async_op=True))
        for b, work in zip(self.buckets, works, strict=True):
            work.wait()
            b.scatter_grads()

    def step(self) -> None:
        optimizer_step(self.local, self.buckets)

    def optimizer_states(self) -> dict[int, torch.Tensor]:
        """The optimizer's state per bucket key (the form PSSync saves)."""
        return {k: torch.from_numpy(v) for k, v in self.local.get_states().items()}

    def load_optimizer_states(self, states: Mapping[int, torch.Tensor]) -> None:
        self.local.set_states({k: v.detach().cpu().numpy() for k, v in states.items()})
