"""The command line and environment of each role of a plan, as the launcher starts them.

On the parameter server (back end ``ps``) roles find each other through the
variables MXNet users know (DMLC_*); with ``ddp`` only the workers run, with the
variables torchrun sets (MASTER_ADDR and MASTER_PORT: worker 0's address and the
plan's root port; RANK, WORLD_SIZE, LOCAL_WORLD_SIZE). Every worker gets LOCAL_RANK,
its index on its host, which picks its GPU (clipflow.train.device). Given the
launcher's log folder, every role also gets CLIPFLOW_HOST_LOG, the log it keeps on its
own host (:mod:`clipflow.host_log`). The environment is built here from an explicit
list, never inherited piecemeal.

* ``local``: the role's process runs here with that environment.
* ``ssh``: the OpenSSH client runs ``python -m clipflow.launch.remote_exec`` on the
  role's host; the role's argv, environment and working directory go to it as one
  JSON line on stdin (never on a command line, so secrets stay out of ``ps``), a
  ``notice`` line later passes SIGUSR1 on to it, and closing that stdin ends the role
  (:mod:`clipflow.launch.remote_exec`).
* ``slurm``: one ``srun`` step per role on its node; the environment travels with
  ``--export=ALL`` (:mod:`clipflow.hosts.slurm`).
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from collections.abc import Callable, Mapping, Sequence

from clipflow.environment import NAMES
from clipflow.errors import ClipflowError
from clipflow.host_log import host_log_path
from clipflow.hosts.hostsfile import parse_host
from clipflow.hosts.plan import Plan, Role, insecure_addresses
from clipflow.hosts.slurm import srun_argv
from clipflow.hosts.ssh import ssh_argv
from clipflow.launch.notice import notice_argv
from clipflow.launch.processes import RoleCommand
from clipflow.launch.remote_exec import request_line


def ps_environment(plan: Plan, role: Role) -> dict[str, str]:
    security = {NAMES["ps_security"]: plan.security}
    if plan.keys_dir:
        security[NAMES["ps_keys"]] = plan.keys_dir
    if insecure_addresses(plan):  # accepted where the job started (check_security), so on every node
        security[NAMES["ps_insecure"]] = "1"
    return {
        **security,
        "DMLC_ROLE": role.role,
        "DMLC_PS_ROOT_URI": plan.root_uri,
        "DMLC_PS_ROOT_PORT": str(plan.root_port),
        "DMLC_NUM_SERVER": str(plan.num_servers),
        "DMLC_NUM_WORKER": str(plan.num_workers),
        "DMLC_RANK": str(role.rank),
        "DMLC_NODE_HOST": role.address,
        NAMES["heartbeat_timeout"]: str(plan.heartbeat_timeout),
    }


def ddp_environment(plan: Plan, role: Role, local_size: int) -> dict[str, str]:
    master = next(r for r in plan.roles if r.role == "worker" and r.rank == 0)
    return {
        NAMES["node_address"]: role.address,  # gloo's interface (clipflow.train.interface)
        "MASTER_ADDR": master.address,
        "MASTER_PORT": str(plan.root_port),
        "RANK": str(role.rank),
        "WORLD_SIZE": str(plan.num_workers),
        "LOCAL_WORLD_SIZE": str(local_size),
    }


def ps_lite_addresses(env: Mapping[str, str], num_hosts: int) -> dict[str, str]:
    """The scheduler's and the role's own address as IPv4 addresses, resolved here: ps-lite binds ZeroMQ to them,
    and ZeroMQ takes addresses, not host names (Slurm plans name nodes). A name that does not resolve, or that
    resolves to loopback while the job spans hosts, is refused naming it."""
    resolved = {}
    for name in ("DMLC_PS_ROOT_URI", "DMLC_NODE_HOST"):
        host = env[name]
        try:
            address = socket.gethostbyname(host)
        except OSError as exc:
            raise ClipflowError(
                f"{name}={host} does not resolve here ({exc}); MXNet's ps-lite needs an address"
            ) from None
        if num_hosts > 1 and address.startswith("127."):
            raise ClipflowError(
                f"{name}={host} resolves to {address} here, a loopback address the other hosts cannot reach: fix "
                "that name's line in /etc/hosts, or name the hosts by address"
            )
        resolved[name] = address
    return resolved


def role_commands(
    plan: Plan,
    worker_argv: Sequence[str] | Callable[[Role], Sequence[str]],
    extra_env: Mapping[str, str] | None = None,
    backend: str = "ps",
    log_dir: str = "",
    workdir: str = "",
    hold_notice: bool = False,
    program_roles: bool = False,
) -> list[RoleCommand]:
    """Workers run ``worker_argv`` (a full command line, or the function giving a worker's); with ``backend``
    ps the scheduler and servers run `clipflow ps role`, with ddp there are none. ``program_roles``: the
    scheduler and servers run ``worker_argv`` too, their DMLC_ROLE telling them apart, as MXNet's launch.py
    starts a ps-lite job (`clipflow launch --mxnet`).

    ``extra_env`` (the launcher's ``--env K=V``) is added to every role's environment; a variable the launcher
    sets for a role itself (DMLC_*, torchrun's, LOCAL_RANK, clipflow's own) is refused there, naming it. With
    ``log_dir`` (the launcher's), each role keeps its own log on its host (:func:`clipflow.host_log.host_log_path`).
    ``workdir``: the roles' working folder on ssh hosts instead of the plan's (a run's own folder on hosts with
    their own disks). ``hold_notice``: the workers take a notice themselves (training workers,
    :mod:`clipflow.launch.notice`): each starts with SIGUSR1 blocked, here or on its ssh host, until its handler is in
    place.
    """
    python = plan.python or sys.executable
    per_host: dict[str, int] = {}
    local_rank: dict[int, int] = {}
    for r in plan.roles:
        if r.role == "worker":
            local_rank[r.rank] = per_host.get(r.host, 0)
            per_host[r.host] = local_rank[r.rank] + 1
    commands = []
    taken: set[str] = set()  # what --env names of the variables the launcher sets itself
    for r in plan.roles:
        if r.role != "worker" and backend == "ddp":
            continue
        env = ddp_environment(plan, r, per_host[r.host]) if backend == "ddp" else ps_environment(plan, r)
        if log_dir:
            env[NAMES["host_log"]] = host_log_path(log_dir, r.role, r.rank)
        if r.role == "worker":
            env["LOCAL_RANK"] = str(local_rank[r.rank])  # its GPU, when the host has GPUs
            env[NAMES["workers_on_host"]] = str(per_host[r.host])  # the worker divides its host's cores
        if program_roles:
            env.update(ps_lite_addresses(env, len(plan.role_hosts())))
        taken.update(set(env) & set(extra_env or {}))
        env = {**(extra_env or {}), **env}
        if r.role == "worker":
            for field in ("fault_kill", "fault_step_s", "sample_log"):  # the tests' faults and per-sample log
                if os.environ.get(NAMES[field]):  # reach workers on other hosts too
                    env[NAMES[field]] = os.environ[NAMES[field]]
            argv = list(worker_argv(r) if callable(worker_argv) else worker_argv)
        elif program_roles:
            argv = list(worker_argv(r) if callable(worker_argv) else worker_argv)
        else:
            argv = [python, "-m", "clipflow", "ps", "role"]
        # on Slurm every task of the job gets the time-limit warning: the workers hold it, the others ignore it
        slurm_notice = ("hold" if r.role == "worker" else "" if program_roles else "ignore") if hold_notice else ""
        commands.append(_wrap(plan, r, argv, env, python, workdir, hold_notice and r.role == "worker", slurm_notice))
    if taken:
        which, it, holds = ("a variable", "it", "it holds") if len(taken) == 1 else ("variables", "them", "they hold")
        raise ClipflowError(
            f"--env {', '.join(sorted(taken))}: {which} the launcher sets for each role itself, from the plan and its "
            f"own flags (-n, -s, --port, --security, --heartbeat-timeout, --log-dir); leave {it} out of --env, and "
            f"set what {holds} with those flags"
        )
    return commands


def _wrap(plan: Plan, role: Role, argv: list[str], env: dict[str, str], python: str, workdir: str,
          hold: bool, slurm_notice: str) -> RoleCommand:  # fmt: skip
    if plan.launcher == "ssh":
        settings = plan.ssh_settings()
        workdir = _remote_dir(workdir or plan.workdir or os.getcwd())
        remote = f"cd {workdir} && exec {shlex.quote(python)} -m clipflow.launch.remote_exec"
        host = parse_host(role.host, f"the plan's host of {role.role} {role.rank}")
        request = request_line(argv, env, None, hold_notice=hold)
        return RoleCommand(role, ssh_argv(host, settings, remote), {}, stdin=request, hold_notice=hold)
    if plan.launcher == "slurm":  # slurmstepd starts the task: SIGUSR1 is held or ignored there, not in this process
        task = notice_argv(python, argv, slurm_notice) if slurm_notice else argv
        return RoleCommand(role, srun_argv(parse_host(role.host, "the plan").host, task), env)
    return RoleCommand(role, argv, env, hold_notice=hold)


def _remote_dir(path: str) -> str:
    """``path`` quoted for the remote shell; a leading ``~/`` stays the remote user's home."""
    if path == "~" or path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"' + (f"/{shlex.quote(rest)}" if rest else "")
    return shlex.quote(path)
