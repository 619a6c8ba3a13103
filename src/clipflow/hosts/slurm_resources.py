"""The Slurm resources of the workflow's train and evaluate jobs under ``workflow/profiles/slurm``.

Each of the two is one job over the plan's hosts, which with the slurm launcher name the Slurm nodes: as many
nodes as hosts, exactly those (``--nodelist``, so the allocation is the plan's), one task per worker slot of the
busiest host, ``cluster.slurm.cpus_per_task`` CPUs per task, ``gpus_per_node`` GPUs on each node, the partition
and the time limit of ``cluster.slurm``. The train job also asks Slurm for SIGUSR1 ``notice_s`` seconds before
its time limit, the stop on notice of ``clipflow train launch``.

The names are those of snakemake-executor-plugin-slurm. ``mpi`` tells the plugin that the rule's command starts
its own ``srun`` steps: the rule then runs in the job's batch step, not wrapped in a step of its own, so the time
limit's signal reaches the roles' steps and not the Snakemake process that waits for them.

``cluster.slurm.time_limit`` is minutes, or a string in one of Slurm's time formats (:data:`TIME_FORMATS`), read as
Slurm reads it (seconds rounded up to the next minute; no field bounded, ``1:90:00`` is 150 minutes) into minutes
where the config enters (:func:`time_limit_minutes`); anything else is refused naming the key and the formats. The
time limit's notice must come after the job starts and leave the workers their grace (:func:`check_notice`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import DEFAULT_PORT, Host, hosts_from_config
from clipflow.values import is_int

TIME_FORMATS = ("minutes (720), minutes:seconds, hours:minutes:seconds (12:00:00), days-hours, days-hours:minutes or "
                "days-hours:minutes:seconds (1-12:00:00)")  # fmt: skip
_DAYS = re.compile(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?")  # days-hours[:minutes[:seconds]]
_CLOCK = re.compile(r"(\d+)(?::(\d+))?(?::(\d+))?")  # minutes, minutes:seconds, hours:minutes:seconds


def time_limit_minutes(value: object, key: str = "cluster.slurm.time_limit") -> int:
    """A Slurm time limit (minutes, or a string in one of :data:`TIME_FORMATS`) in minutes, as Slurm reads it;
    ClipflowError naming ``key`` and the formats for anything else."""
    if is_int(value) and value >= 1:
        return int(value)
    seconds = None
    text = value.strip() if isinstance(value, str) else ""
    if days := _DAYS.fullmatch(text):
        d, h, m, s = (int(part or 0) for part in days.groups())
        seconds = ((d * 24 + h) * 60 + m) * 60 + s
    elif clock := _CLOCK.fullmatch(text):
        p = [int(part) for part in clock.groups() if part is not None]
        h, m, s = {1: (0, p[0], 0), 2: (0, *p), 3: tuple(p)}[len(p)]  # minutes; minutes:seconds; h:m:s
        seconds = (h * 60 + m) * 60 + s
    if seconds is None or seconds < 1:
        raise ClipflowError(
            f"config: {key} {value!r} is not a Slurm time limit of a minute or more; give {TIME_FORMATS}"
        )
    return math.ceil(seconds / 60)


def check_notice(cluster: Mapping, stop_grace: float) -> None:
    """With the slurm launcher, the time limit's notice (``cluster.slurm.notice_s``, 0: none) shorter than the time
    limit (else it would come before the job starts) and longer than ``train.stop_grace`` (else Slurm ends the job
    before the workers' stop and checkpoint on notice is done). ClipflowError naming the keys and values."""
    slurm = cluster["slurm"]
    notice, minutes = slurm["notice_s"], slurm["time_limit"]
    if cluster["launcher"] != "slurm" or not notice:
        return
    if notice >= minutes * 60:
        raise ClipflowError(
            f"config: cluster.slurm.notice_s {notice} is not shorter than cluster.slurm.time_limit {minutes} min "
            f"({minutes * 60} s): the notice would come before the job starts; give notice_s below {minutes * 60}, "
            "or 0 for no notice"
        )
    if notice <= stop_grace:
        raise ClipflowError(
            f"config: cluster.slurm.notice_s {notice} is not longer than train.stop_grace {stop_grace:g}: Slurm would "
            "end the job before the workers' stop and checkpoint on notice is done; give notice_s above "
            f"{stop_grace:g} plus a step, or 0 for no notice"
        )


def slurm_nodes(cluster: Mapping) -> list[Host]:
    """``cluster.hosts`` as Slurm nodes: bare node names (no user, no port), none of them a loopback name; a hosts
    file is refused, as the slurm launcher refuses it."""
    if cluster["hosts_file"]:
        raise ClipflowError(
            f"config: cluster.hosts_file ({cluster['hosts_file']}) is set with cluster.launcher slurm, whose hosts are "
            "Slurm nodes: name them in cluster.hosts (slots=N for several workers) and leave hosts_file empty"
        )
    hosts = hosts_from_config(cluster["hosts"])
    for host in hosts:
        if host.user or host.port != DEFAULT_PORT or host.host in ("localhost", "127.0.0.1", "::1"):
            raise ClipflowError(
                f"config: cluster.launcher is slurm but cluster.hosts names {replace(host, slots=1)}, not a Slurm "
                "node: the train and evaluate jobs run on the nodes the hosts name; give node names as sinfo -N "
                "lists them (slots=N for several workers)"
            )
    return hosts


def job_resources(cluster: Mapping, notice: bool) -> dict[str, int | str]:
    """The resources of one multi-node job over the plan's hosts (``notice``: ask for the time limit's SIGUSR1);
    none unless the launcher is slurm (the local and ssh launchers run the job on one machine)."""
    if cluster["launcher"] != "slurm":
        return {}
    slurm = cluster["slurm"]
    hosts = slurm_nodes(cluster)
    per_node = max(host.slots for host in hosts)
    tasks = len(hosts) * per_node
    extra = [f"--nodelist={','.join(host.host for host in hosts)}", f"--ntasks-per-node={per_node}"]
    if notice and slurm["notice_s"]:
        extra.append(f"--signal=USR1@{slurm['notice_s']}")
    resources: dict[str, int | str] = {
        "nodes": len(hosts),
        "tasks": tasks,
        "cpus_per_task": slurm["cpus_per_task"],
        "runtime": slurm["time_limit"],
        "slurm_extra": " ".join(extra),
    }
    if tasks > 1:  # the plugin takes a one-task "mpi" job for a mistake; one task runs wrapped in a step
        resources["mpi"] = "srun"
    if slurm["partition"]:
        resources["slurm_partition"] = slurm["partition"]
    if slurm["gpus_per_node"]:
        resources["gres"] = f"gpu:{slurm['gpus_per_node']}"
        resources["tasks_per_gpu"] = 0  # the tasks are the workers' slots, not a count per GPU
    return resources
