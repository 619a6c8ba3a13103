"""Processes a test session leaves behind: every process the suite starts inherits one marker variable, so what
still carries it when the session ends (a training worker, an sshd, a Slurm job's step) outlived its test."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from netns_hosts import kill_pids, wait_until

MARKER = "PYTEST_CLIPFLOW_SESSION"  # not CLIPFLOW_*: no setting of clipflow's


def carrying(token: str) -> dict[int, str]:
    """pid -> command line of every live process but this one whose environment has ``MARKER=token``."""
    needle = f"{MARKER}={token}".encode() + b"\0"
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if needle in (proc / "environ").read_bytes() + b"\0":
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                if cmd:  # a zombie has no command line: it has ended, only its parent has not reaped it
                    found[int(proc.name)] = cmd
    return found


def end_leftovers(token: str, grace_s: float = 10) -> dict[int, str]:
    """Waits ``grace_s`` for the session's processes to end by themselves, then kills those left; returns them."""
    wait_until(lambda: not carrying(token), grace_s, 0.2)
    left = carrying(token)
    kill_pids(list(left))
    return left
