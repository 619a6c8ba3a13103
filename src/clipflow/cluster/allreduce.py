"""The link check's all-reduce: one sum across all the plan's workers, with the back end the run will use, on the
roles the run will start.

The plan's roles (with ``ps`` its scheduler and servers running `clipflow ps role`, with ``ddp`` the workers
alone, given torchrun's variables) are started by the launcher the run uses (:mod:`clipflow.launch.roles`,
:class:`clipflow.launch.processes.Launcher`), on the plan's hosts and ports, with
:mod:`clipflow.cluster.allreduce_probe` as the workers' program: :data:`BYTES` of float32 summed once untimed and
:data:`ROUNDS` times timed. Everything is stopped after :data:`TIME_LIMIT_S`.

The figure is worker 0's mean seconds a round and a bus bandwidth: the bytes x 2(N-1)/N / seconds, N the workers,
what a ring all-reduce sends and receives on each worker's link for a sum of that size (as nccl-tests' "bus
bandwidth"), so that it reads against the pairs' Gbit/s whatever the back end; the parameter server moves other
amounts (each worker pushes and pulls the whole tensor, or each host once with ``_device`` modes), which is why
the factor is recorded with the figure.

A sum that fails or runs out of time is a note in the figures (what the launcher said: the role that failed, its
last line, its log), not a failure of the stage: the run may still work (a port busy now). Roles that cannot be
started at all (the program or ssh) are a ClipflowError naming the host.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from clipflow.cluster import allreduce_probe
from clipflow.errors import ClipflowError
from clipflow.hosts.plan import Plan, check_security
from clipflow.launch.processes import SSH_FAILED, Launcher
from clipflow.launch.roles import role_commands

BYTES = 4 * 1024 * 1024  # a few MB: a bucket of a model's gradient, large enough that the bandwidth shows
ROUNDS = 2
TIME_LIMIT_S = 60.0  # starting the roles (Python and torch on every host) takes most of it
GRACE_S = 3.0
CANNOT_START = (SSH_FAILED, 126, 127)  # ssh failed; the remote shell found no program, or could not run it
FACTOR_OF = "ring: 2(N-1)/N of the bytes on each worker's link, N the workers"


def bus_factor(workers: int) -> float:
    return 2 * (workers - 1) / workers


def measure_allreduce(plan: Plan, backend: str, mode: str, log_dir: str | Path, nbytes: int = BYTES,
                      time_limit_s: float = TIME_LIMIT_S, own_disks: bool = False) -> dict:  # fmt: skip
    """Sums ``nbytes`` across the plan's workers with ``backend`` (ps with kvstore ``mode``, or ddp), the roles'
    logs in ``log_dir``; the figures for checks.json (``ok`` false and a ``note`` when the sum failed, ran out
    of time or was not run). The roles run in the home folder on ssh hosts (the check comes before the working
    folder is synced). ``own_disks`` (storage local): the job's CURVE keys reach the hosts only at launch, so a
    ps plan with keys is not run, saying so."""
    figures = {"backend": backend, "mode": mode if backend == "ps" else "gloo", "workers": plan.num_workers,
               "bytes": nbytes, "rounds": ROUNDS, "factor": bus_factor(plan.num_workers), "factor_of": FACTOR_OF,
               "seconds": None, "gbit_s": None, "ok": False, "note": ""}  # fmt: skip
    if backend == "ps":
        check_security(plan)  # refused here as the run would be
        if plan.keys_dir and own_disks:
            figures["note"] = "not run: with storage local the job's CURVE keys reach the hosts only at launch"
            return figures
    python = plan.python or sys.executable
    argv = [python, "-m", "clipflow.cluster.allreduce_probe", backend, mode, str(nbytes), str(ROUNDS)]
    console = io.StringIO()
    commands = role_commands(plan, argv, backend=backend, workdir="~")
    launcher = Launcher(commands, log_dir, grace_s=GRACE_S, console=console, time_limit_s=time_limit_s)
    try:
        launcher.run()
    except ClipflowError as exc:  # a role's program cannot start here
        raise ClipflowError(f"all-reduce check: {exc}") from None
    ending = launcher.ending
    said = [line for line in console.getvalue().splitlines() if line.startswith("clipflow launch:")]
    if ending.code in CANNOT_START and ending.failed:
        raise ClipflowError(f"all-reduce check: the roles cannot start: {ending.cause}; "
                            f"see {said[-1] if said else log_dir}")  # fmt: skip
    got = _reply(Path(log_dir) / "worker-0.log")
    if ending.code != 0 or got is None:
        why = said[-1].removeprefix("clipflow launch: ") if said else f"worker 0 reported nothing ({ending.cause})"
        figures["note"] = f"all-reduce failed: {why}"
        return figures
    seconds = got["seconds"]
    figures.update(bytes=got["bytes"], workers=got["workers"], seconds=seconds, ok=True,
                   factor=bus_factor(got["workers"]))  # fmt: skip
    figures["gbit_s"] = got["bytes"] * figures["factor"] * 8 / seconds / 1e9 if seconds > 0 else None
    return figures


def _reply(path: Path) -> dict | None:
    """Worker 0's figures from its log, or None."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith(allreduce_probe.REPLY):
            return json.loads(line.removeprefix(allreduce_probe.REPLY))
    return None


def format_allreduce(figures: dict) -> str:
    """One console line for the all-reduce."""
    what = f"{figures['backend']} {figures['mode']}, {figures['workers']} workers, {figures['bytes'] / 1e6:.3g} MB"
    if not figures["ok"]:
        return f"all-reduce ({what}): {figures['note']}"
    return (f"all-reduce ({what}): {figures['seconds']:.3g} s, {figures['gbit_s']:.3g} Gbit/s bus bandwidth "
            f"(bytes x {figures['factor']:.3g} / s; {figures['factor_of']})")  # fmt: skip
