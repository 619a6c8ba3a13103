"""The collectives a trainer needs, on either back end: ``ps`` (clipflow's parameter server) or
``ddp`` (torch.distributed with gloo).

Both give the same four operations, each called by every worker at the same point:

* ``broadcast(name, tensors)``: rank 0's tensors, in place, on every worker;
* ``all_sum(name, tensor)``: the sum over the workers, in place;
* ``barrier()``;
* ``gradient_sync(model, optimizer, wd_mult, clip_norm)``: the object that sums gradients and
  updates the weights (PSSync or DDPSync; the optimizer settings are given without
  ``rescale_grad``, which both set to 1 / (workers x accumulate) so the sum of every micro-batch's mean becomes
  the global batch's mean).

``name`` says what the tensors are (``meta``, ``buffers``, ``optimizer``, ``metrics``, ``val``, ``partial``,
``carried``, ``layout``, ``plan``, ``precise_bn_mean``, ``precise_bn_var``): the parameter server keeps each
kind under its own key range; torch.distributed ignores it.
Tensors may be on any device: each back end works on copies where it needs them (the
parameter server on the CPU; gloo on the CPU, NCCL on the worker's GPU).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from clipflow.environment import int_var, read_env, required_var
from clipflow.errors import ABORTED, ClipflowError, CommError
from clipflow.train.buckets import WdMult
from clipflow.train.interface import choose_interface
from clipflow.train.job import PSSettings


class PSComm:
    """The trainer's collectives on the parameter server's key-value store."""

    backend = "ps"
    transport = "zmq"  # what carries the gradients
    # one key per use: a key keeps the size its first push gave it
    KEYS = {"buffers": 100_000, "optimizer": 200_000, "meta": 300_000, "metrics": 300_001, "val": 300_002,
            "partial": 300_003, "carried": 300_004, "notice": 300_005, "layout": 300_006,
            "plan": 300_007, "precise_bn_mean": 300_008, "precise_bn_var": 300_009}  # fmt: skip

    def __init__(self, kv: Any, settings: PSSettings):
        self.kv, self.settings = kv, settings
        self.rank, self.num_workers = kv.rank, kv.num_workers
        self._summed: set[int] = set()  # keys initialised for all_sum

    @property
    def optimizer_on_servers(self) -> bool:
        return self.settings.update_on_kvstore

    def broadcast(self, name: str, tensors: list[torch.Tensor]) -> None:
        """One init (a barrier: rank 0's values win), then one pull."""
        if tensors:
            keys = list(range(self.KEYS[name], self.KEYS[name] + len(tensors)))
            with staged(tensors, torch.device("cpu")) as local:
                self.kv.init(keys, local)
                self.kv.pull(keys, local)

    def all_sum(self, name: str, tensor: torch.Tensor) -> None:
        key = self.KEYS[name]
        with staged([tensor], torch.device("cpu")) as (local,):
            if key not in self._summed:
                self.kv.init(key, torch.zeros_like(local))
                self._summed.add(key)
            self.kv.pushpull([key], [local], [local])

    def barrier(self) -> None:
        self.kv.barrier()

    def gradient_sync(self, model: torch.nn.Module, optimizer: Mapping[str, Any], wd_mult: WdMult, clip_norm: float,
                      accumulate: int = 1):  # fmt: skip
        from clipflow.train.ps_sync import PSSync

        sync = PSSync(
            model,
            self.kv,
            update_on_kvstore=self.settings.update_on_kvstore,
            optimizer={**optimizer, "rescale_grad": 1.0 / (self.num_workers * accumulate)},
            wd_mult=wd_mult,
            clip_norm=clip_norm,
        )
        if self.settings.compression != "none":
            self.kv.set_gradient_compression(
                {"type": self.settings.compression, "threshold": self.settings.threshold}, keys=sync.keys
            )
        return sync


@dataclass(frozen=True)
class DDPConfig:
    """Where a ddp process finds the others: the variables torchrun and clipflow's launcher set."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    timeout_s: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, rank: int | None = None) -> DDPConfig:
        """From torchrun's variables; ``rank``, when given (a worker's command line), instead of RANK."""
        env = os.environ if environ is None else environ
        world = int_var(env, "WORLD_SIZE", "the number of training processes, an integer >= 1", low=1)
        if rank is not None and not 0 <= rank < world:
            raise ClipflowError(f"rank {rank} is not one of the WORLD_SIZE={world} processes (0..{world - 1})")
        return cls(
            rank=rank if rank is not None else int_var(
                env, "RANK", f"this process's rank, an integer 0..{world - 1} (WORLD_SIZE={world})", low=0,
                high=world - 1),
            world_size=world,
            master_addr=required_var(env, "MASTER_ADDR", "the address of the rank 0 process"),
            master_port=int_var(env, "MASTER_PORT", "the rank 0 process's port, 1..65535", low=1, high=65535),
            timeout_s=read_env(env).ddp_timeout,
        )  # fmt: skip


class DDPComm:
    """The trainer's collectives on torch.distributed, set up from :class:`DDPConfig`: NCCL when the worker
    trains on a GPU, gloo on the CPU."""

    backend = "ddp"
    optimizer_on_servers = False

    def __init__(self, config: DDPConfig, device: torch.device | None = None):
        import torch.distributed as dist

        self.config = config
        self.rank, self.num_workers = config.rank, config.world_size
        self.device = device or torch.device("cpu")  # where the collectives' tensors must be
        self._dist = dist
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.transport = "nccl" if self.device.type == "cuda" else "gloo"
        choose_interface(os.environ, self.transport)  # read by gloo or NCCL when the group is made
        dist.init_process_group(
            self.transport,
            init_method=f"tcp://{_host_port(config.master_addr, config.master_port)}",
            rank=config.rank,
            world_size=config.world_size,
            timeout=datetime.timedelta(seconds=config.timeout_s),
        )

    def __enter__(self) -> DDPComm:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()

    def broadcast(self, name: str, tensors: list[torch.Tensor]) -> None:
        with staged(tensors, self.device) as local:
            for t in local:
                self._dist.broadcast(t, src=0)

    def all_sum(self, name: str, tensor: torch.Tensor) -> None:
        with staged([tensor], self.device) as (local,):
            self._dist.all_reduce(local)

    def barrier(self) -> None:
        self._dist.barrier()

    def gradient_sync(self, model: torch.nn.Module, optimizer: Mapping[str, Any], wd_mult: WdMult, clip_norm: float,
                      accumulate: int = 1):  # fmt: skip
        from clipflow.train.ddp_sync import DDPSync

        return DDPSync(model, optimizer={**optimizer, "rescale_grad": 1.0 / (self.num_workers * accumulate)},
                       wd_mult=wd_mult,
                       clip_norm=clip_norm, device=self.device)  # fmt: skip


@contextlib.contextmanager
def staged(tensors: list[torch.Tensor], device: torch.device) -> Iterator[list[torch.Tensor]]:
    """``tensors`` as a back end needs them: contiguous, on ``device``; copies (written back afterwards) for
    those that are not."""
    local = [t if t.device == device and t.is_contiguous() else t.detach().to(device).contiguous() for t in tensors]
    yield local
    with torch.no_grad():
        for t, copy in zip(tensors, local, strict=True):
            if copy is not t:
                t.copy_(copy)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def lost_peer(exc: BaseException) -> bool:
    """Whether a torch.distributed error says another process went away (gloo's messages)."""
    return any(text in str(exc) for text in LOST_PEER)


TIMED_OUT = ("Timed out", "timed out")  # gloo's collectives, the TCP store's connect and wait


def timed_out(exc: BaseException) -> bool:
    """Whether a torch.distributed error says a collective or the rendezvous waited past its timeout."""
    return any(text in str(exc) for text in TIMED_OUT)


def run_in_group(what: str, config: DDPConfig, device: torch.device, body: Callable[[DDPComm], object]) -> int:
    """Runs ``body(comm)`` in this process's torch.distributed group; the process's exit status. When another
    process dies, gloo reports the lost connection here: that is an echo of the failure (exit ABORTED), so the
    launcher names the process that died, not this one. A wait past the timeout is a CommError naming it."""
    try:
        with DDPComm(config, device) as comm:
            body(comm)
    except RuntimeError as exc:  # torch's DistError and its kinds are RuntimeErrors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if timed_out(exc):
            raise CommError(
                f"{what} rank {config.rank}: torch.distributed waited longer than {config.timeout_s:g} s "
                f"(CLIPFLOW_DDP_TIMEOUT) for the other processes at {config.master_addr}:{config.master_port}: {first}"
            ) from None
        if not lost_peer(exc):
            raise
        print(f"clipflow: {what} rank {config.rank}: another process left the job ({first})", file=sys.stderr)
        return ABORTED
    return 0
