"""Fault injection for tests: `CLIPFLOW_FAULT_KILL=rank:epoch[:iteration]` makes that worker
SIGKILL itself at that point (epoch 1-based, iteration 0-based within the epoch, default 0)."""

from __future__ import annotations

import os
import signal

from clipflow.errors import ClipflowError

VARIABLE = "CLIPFLOW_FAULT_KILL"


def parse(value: str | None) -> tuple[int, int, int] | None:
    if not value:
        return None
    parts = value.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        numbers = [int(p) for p in parts] + ([0] if len(parts) == 2 else [])
    except ValueError:
        raise ClipflowError(f"{VARIABLE}={value!r}: expected rank:epoch[:iteration], e.g. 1:2") from None
    return numbers[0], numbers[1], numbers[2]


class FaultInjector:
    def __init__(self, rank: int, environ: dict[str, str] | None = None):
        spec = parse((environ if environ is not None else os.environ).get(VARIABLE))
        self.at = spec[1:] if spec and spec[0] == rank else None

    def check(self, epoch: int, iteration: int) -> None:
        if self.at == (epoch, iteration):
            print(f"fault injection: killing this worker at epoch {epoch} iteration {iteration}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
