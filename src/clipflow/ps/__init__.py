"""Parameter server with MXNet kvstore semantics over pyzmq.

Roles (one process each): one scheduler, DMLC_NUM_SERVER servers, DMLC_NUM_WORKER
workers, configured from the DMLC_* environment variables (see :mod:`clipflow.ps.env`).
Modules: ``env`` (settings), ``wire`` (message codec), ``transport`` (sockets),
``placement`` (key -> server), ``registry``/``scheduler`` (nodes, ranks, barriers,
liveness), ``node``/``heartbeat`` (a node's link to the scheduler), ``store``/``server``
(key-value state and its process), ``kvstore`` (the worker API), ``customer`` (its requests,
tracked until answered), ``reliable`` (resend and duplicates).

``KVStore`` is imported lazily so the scheduler and servers do not load torch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clipflow.errors import ClipflowError
from clipflow.ps.env import PSConfig
from clipflow.ps.scheduler import run_scheduler
from clipflow.ps.server import run_server

if TYPE_CHECKING:
    from clipflow.ps.kvstore import KVStore

__all__ = ["KVStore", "PSConfig", "run_role", "run_scheduler", "run_server"]


def run_role(environ: Mapping[str, str] | None = None) -> int:
    """Run this process's DMLC_ROLE (scheduler or server) and return its exit status. A notice (SIGUSR1, which
    Slurm's ``--signal=USR1@...`` sends to every process of the job) is the workers' to act on: here it is ignored,
    and the role ends as at the end of the run once the workers have stopped."""
    cfg = PSConfig.from_env(os.environ if environ is None else environ)
    if cfg.role in ("scheduler", "server"):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if cfg.role == "scheduler":
        return run_scheduler(cfg)
    if cfg.role == "server":
        return run_server(cfg)
    raise ClipflowError(
        "DMLC_ROLE=worker: workers are the training processes; run the trainer, which creates the KVStore"
    )


def __getattr__(name: str) -> Any:
    if name == "KVStore":
        from clipflow.ps.kvstore import KVStore

        return KVStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
