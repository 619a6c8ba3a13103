"""Fault injection for tests: `CLIPFLOW_FAULT_KILL=rank:epoch[:iteration]` makes that worker
SIGKILL itself at that point (epoch 1-based, iteration 0-based within the epoch, default 0).

The launcher passes the variable to its workers in the first launch only: before a restart
(:mod:`clipflow.train.restarts`) it removes it from its own environment, so a relaunched worker resumes
past the point instead of dying there again.

`CLIPFLOW_FAULT_STEP_S=S` makes every worker sleep S seconds after each optimizer step, in every launch: a run
that is sure to outlast a time limit whatever the CPU (the Slurm notice tests)."""

from __future__ import annotations

import os
import signal
import time

from clipflow.environment import read_env


class FaultInjector:
    def __init__(self, rank: int, environ: dict[str, str] | None = None):
        settings = read_env(environ)
        spec = settings.fault_kill
        self.at = spec[1:] if spec and spec[0] == rank else None
        self.step_s = settings.fault_step_s

    def check(self, epoch: int, iteration: int) -> None:
        if self.at == (epoch, iteration):
            print(f"fault injection: killing this worker at epoch {epoch} iteration {iteration}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def after_step(self) -> None:
        if self.step_s:
            time.sleep(self.step_s)
