"""The command line and environment of each role of a plan, as the launcher starts them.

Roles find each other through the variables MXNet users know (DMLC_*); the
environment is built here from an explicit list, never inherited piecemeal.
"""

from __future__ import annotations

import os
import sys

from clipflow.cluster.plan import Plan
from clipflow.train.launcher import RoleCommand


def ps_environment(plan: Plan, role: str, rank: int) -> dict[str, str]:
    security = {"CLIPFLOW_PS_SECURITY": plan.security}
    if plan.keys_dir:
        security["CLIPFLOW_PS_KEYS"] = plan.keys_dir
    return {
        **security,
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": plan.root_uri,
        "DMLC_PS_ROOT_PORT": str(plan.root_port),
        "DMLC_NUM_SERVER": str(plan.num_servers),
        "DMLC_NUM_WORKER": str(plan.num_workers),
        "DMLC_RANK": str(rank),
        "CLIPFLOW_HEARTBEAT_TIMEOUT": str(plan.heartbeat_timeout),
    }


def role_commands(plan: Plan, worker_args: list[str]) -> list[RoleCommand]:
    """Scheduler and servers run `clipflow ps role`; workers run `clipflow train worker` with worker_args."""
    python = [sys.executable, "-m", "clipflow"]
    per_host: dict[str, int] = {}
    for r in plan.roles:
        if r.role == "worker":
            per_host[r.host] = per_host.get(r.host, 0) + 1
    commands = []
    for r in plan.roles:
        env = ps_environment(plan, r.role, r.rank)
        if r.role == "worker":
            threads = max(1, (os.cpu_count() or 1) // per_host[r.host])
            env["CLIPFLOW_TORCH_THREADS"] = str(threads)
            commands.append(RoleCommand(r, [*python, "train", "worker", *worker_args], env))
        else:
            commands.append(RoleCommand(r, [*python, "ps", "role"], env))
    return commands
