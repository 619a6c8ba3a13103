"""Starting a job's processes on the hosts, for `clipflow train launch`, `clipflow evaluate launch`, the link
check and `clipflow launch` (MXNet's launch.py) alike.

:func:`launch_workers` runs ``python -m clipflow COMMAND`` on every worker of a plan (and, on the parameter
server, its scheduler and servers) until the first failure (:func:`run_workers` tells how it ended);
:func:`launch_program` does launch.py's job for any program: a plan from a :class:`LaunchConfig`, the working
folder synced, a scheduler, servers and workers running the program with the DMLC_* variables set.
:class:`HostRun` is where a run lives on hosts with their own disks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host, parse_host
from clipflow.hosts.plan import Plan, Role, check_ports, check_security, make_plan, ssh_fields
from clipflow.hosts.slurm import check_slurm_launch
from clipflow.hosts.ssh import SshSettings
from clipflow.hosts.staged import Staged, read_staged
from clipflow.hosts.sync import sync_host
from clipflow.launch.processes import (
    FORWARD_NOTICE,
    TRAIN_NOTICE,
    Ending,
    Launcher,
    NoticePolicy,
    RoleCommand,
    program_problem,
)
from clipflow.launch.roles import role_commands

Command = Callable[[Role], Sequence[str]]  # a worker's clipflow arguments


def worker_commands(plan: Plan, command: Command, backend: str, log_dir: str, host_logs: bool,
                    workdir: str = "", hold_notice: bool = False) -> list[RoleCommand]:  # fmt: skip
    """What runs where: ``python -m clipflow`` with each worker's ``command`` on the plan's workers (with backend
    ps also its scheduler and servers). ``host_logs``: each role also keeps its log on its own host, for
    collection. ``workdir``: the roles' working folder on ssh hosts (default: the plan's)."""
    python = plan.python or sys.executable

    def argv(role: Role) -> list[str]:
        return [python, "-m", "clipflow", *command(role)]

    return role_commands(plan, argv, backend=backend, log_dir=log_dir if host_logs else "", workdir=workdir,
                         hold_notice=hold_notice)  # fmt: skip


def launch_workers(plan: Plan, command: Command, backend: str, log_dir: str, grace: float, host_logs: bool,
                   workdir: str = "", stop_grace: float | None = None) -> int:  # fmt: skip
    """Runs :func:`worker_commands` until the first failure; the launcher's exit code (:func:`run_workers`)."""
    return run_workers(plan, command, backend, log_dir, grace, host_logs, workdir, stop_grace).code


def check_launcher(plan: Plan) -> None:
    """What the plan's launcher needs before any role starts; the slurm one: srun, an allocation holding the
    plan's nodes (:func:`clipflow.hosts.slurm.check_slurm_launch`)."""
    if plan.launcher == "slurm":
        check_slurm_launch(parse_host(host, "the plan").host for host in plan.role_hosts())


def run_workers(plan: Plan, command: Command, backend: str, log_dir: str, grace: float, host_logs: bool,
                workdir: str = "", stop_grace: float | None = None,
                deadline: float | None = None) -> Ending:  # fmt: skip
    """:func:`launch_workers`, telling how the launch ended (:class:`clipflow.launch.processes.Ending`).
    ``stop_grace``: training workers, which stop on notice (SIGTERM or SIGUSR1 to the launcher) within that many
    seconds, resumable; None (evaluation): either signal stops everything at once. ``deadline``: a monotonic
    time at which the launcher gives the training workers the notice itself (a Slurm time limit near)."""
    check_launcher(plan)
    if backend == "ps":
        check_security(plan)
    check_ports(plan)
    training = stop_grace is not None
    commands = worker_commands(plan, command, backend, log_dir, host_logs, workdir, hold_notice=training)
    notice = NoticePolicy(signals=TRAIN_NOTICE, seconds=stop_grace, deadline=deadline) if training else None
    launcher = Launcher(commands, log_dir, grace_s=grace, notice=notice)
    launcher.run()
    return launcher.ending


def job_command(group: str, job_file: Path | str) -> Command:
    """The command line of a worker of ``group`` (train, evaluate): its job file and its rank."""
    return lambda role: [group, "worker", "--job", str(job_file), "--rank", str(role.rank)]


@dataclass(frozen=True)
class HostRun:
    """Where a run lives on hosts with their own disks: its ``folder`` on every host (``<cluster.job_dir>/<run>``,
    maybe ``~/``-relative) and the staged data (:class:`clipflow.hosts.staged.Staged`)."""

    folder: str
    staged: Staged

    @classmethod
    def of(cls, staged_file: str, folder: str) -> HostRun | None:
        """From `train launch`'s --staged and --host-dir: None with shared storage (or no --staged)."""
        if not staged_file:
            return None
        staged = read_staged(staged_file)
        if not staged.local:
            return None
        if not folder:
            raise ClipflowError(f"{staged_file} says storage local: give --host-dir, the run's folder on the hosts")
        return cls(folder, staged)


@dataclass(frozen=True)
class LaunchConfig:
    """What `clipflow launch` (MXNet's launch.py flags) starts: ``num_workers`` workers and ``num_servers``
    servers placed on ``hosts`` by ``launcher``, each with ``env`` added."""

    num_workers: int
    num_servers: int
    hosts: list[Host]
    launcher: str
    ssh: SshSettings
    port: int
    heartbeat_timeout: float
    security: str
    placement: str
    sync_dst_dir: str = ""  # ssh: rsync this folder there first and run there
    python: str = ""  # ssh: the Python on the hosts (default: this one)
    env: Mapping[str, str] | None = None
    log_dir: str = "logs/launch"
    grace: float = 10.0
    mxnet: bool = False  # the scheduler and servers run the command too (ps-lite's roles), not clipflow's own


MXNET_SECURITY = "--mxnet (ps-lite, whose traffic clipflow cannot encrypt)"


MXNET_FIX = "Keep such a job on loopback or a network you trust"


def launch_security(config: LaunchConfig) -> str:
    """The plan's security: as given, or with --mxnet none (ps-lite has no CURVE); --mxnet with --security curve
    is a ClipflowError."""
    if not config.mxnet:
        return config.security
    if config.security == "curve":
        raise ClipflowError(
            "--mxnet with --security curve: ps-lite (MXNet's kvstore) cannot encrypt its traffic; leave --security "
            "out (auto) or give none, and keep the job on loopback or, with CLIPFLOW_PS_INSECURE=1, a trusted network"
        )
    return "none"


def launch_program(config: LaunchConfig, command: Sequence[str]) -> int:
    """MXNet launch.py's job: a scheduler, the servers and the workers running ``command``, the same logs,
    teardown and exit code. Without ``config.mxnet`` the scheduler and servers are clipflow's own (a program
    using :mod:`clipflow.ps`); with it they run ``command`` too, with DMLC_ROLE scheduler or server, as ps-lite
    (MXNet's kvstore) needs, without CURVE (:func:`launch_security`). With the local launcher, a program that
    cannot be started (not found, not executable) is a ClipflowError before any role starts. SIGUSR1 to the
    launcher is passed on to the workers' programs, which get ``config.grace`` seconds to exit before everything
    is stopped; SIGTERM and SIGINT stop everything at once."""
    if not command:
        raise ClipflowError("no command to launch: clipflow launch -n 2 -H hosts -- python train.py ...")
    if config.launcher == "local":  # on other hosts the program is theirs to find (remote_exec, srun say so)
        search_path = dict(config.env or {}).get("PATH", os.environ.get("PATH"))
        problem = program_problem(command[0], search_path)
        if problem:
            raise ClipflowError(f"cannot launch {command[0]}: {problem}; no role was started")
    ssh = ssh_fields(config.launcher, config.ssh, config.python, config.sync_dst_dir)
    plan = make_plan(config.launcher, config.hosts, config.num_workers, config.num_servers, config.port,
                     config.heartbeat_timeout, launch_security(config), Path(config.log_dir) / "ps_keys",
                     config.placement, ssh)  # fmt: skip
    check_launcher(plan)
    if config.mxnet:
        check_security(plan, setting=MXNET_SECURITY, fix=MXNET_FIX)
    else:
        check_security(plan)
    check_ports(plan)
    commands = role_commands(plan, list(command), dict(config.env or {}), program_roles=config.mxnet)  # --env checked
    if config.sync_dst_dir and config.launcher == "ssh":
        for host in config.hosts:
            sync_host(Path.cwd(), host, config.sync_dst_dir, config.ssh)
    notice = NoticePolicy(signals=FORWARD_NOTICE, seconds=config.grace)
    return Launcher(commands, config.log_dir, grace_s=config.grace, notice=notice).run()
