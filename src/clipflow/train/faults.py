"""Fault injection for tests: `CLIPFLOW_FAULT_KILL=rank:epoch[:iteration]` makes that worker
SIGKILL itself at that point (epoch 1-based, iteration 0-based within the epoch, default 0).

The launcher passes the variable to its workers in the first launch only: before a restart
(:mod:`clipflow.train.restarts`) it removes it from its own environment, so a relaunched worker resumes
past the point instead of dying there again."""

from __future__ import annotations

import os
import signal

from clipflow.environment import read_env


class FaultInjector:
    def __init__(self, rank: int, environ: dict[str, str] | None = None):
        spec = read_env(environ).fault_kill
        self.at = spec[1:] if spec and spec[0] == rank else None

    def check(self, epoch: int, iteration: int) -> None:
        if self.at == (epoch, iteration):
            print(f"fault injection: killing this worker at epoch {epoch} iteration {iteration}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
