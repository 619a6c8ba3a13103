"""Restarts: a failed training launch relaunched from the newest checkpoint, on the hosts that are still there.

After a role fails (not after success, not after a stop on notice, exit status RESUMABLE, and not after a
signal to the launcher), while the job's ``policy.max_restarts`` allows: every host of the original plan is
checked (ssh launcher: a login and ``true`` within :data:`HOST_CHECK_S`; the local launcher's localhost and a
Slurm allocation's nodes are taken as there), the hosts that are gone are dropped, and the run is launched again
when at least ``policy.fewest_workers`` workers remain. The workers resume from the newest checkpoint, as any
launch does. With fewer hosts the plan is made anew from the remaining hosts, each with the workers it had, and
the job gets worker lists for the new count, split from ``paths.train_list`` into
``<checkpoint_root>/splits-<W>w/`` beside that membership's ``job.json``; the trainer resizes. A host that comes
back is used again: each restart checks the original plan's hosts. Fault injection (CLIPFLOW_FAULT_KILL) is for
the first attempt only.

Every attempt is one JSON line of ``<checkpoint_root>/restarts.jsonl`` (:class:`Attempt`), the file rewritten
whole with its sha256 beside it after each attempt, so collection can bring it home checked; a last line cut short
is set aside when the launcher opens it (:mod:`clipflow.jsonl`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from clipflow.checksums import write_text_with_checksum
from clipflow.data.splits import write_splits
from clipflow.environment import NAMES
from clipflow.errors import RESUMABLE, ClipflowError
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import Plan, make_plan
from clipflow.jsonl import open_for_append, record_lines
from clipflow.launch.processes import Ending
from clipflow.made import Made
from clipflow.train.checkpoint import CheckpointStore
from clipflow.train.job import TrainJob

RESTARTS_FILE = "restarts.jsonl"
EXPECTED = "one JSON object an attempt, as the launcher writes restarts.jsonl"
FIELDS = ("attempt", "started", "ended", "code", "cause", "workers")  # what the report draws
HOST_CHECK_S = 5.0  # how long a host may take to answer the check before a restart

Attempt_ = Callable[[TrainJob, Path | None], Ending]  # one launch of a job (its own job file, or None: the run's)


@dataclass(frozen=True)
class Attempt:
    """One launch of the run's workers, as ``restarts.jsonl`` records it."""

    launch: float  # when the launcher started (several launches of a run append to one file)
    attempt: int  # 1: the first launch; 2..: restarts
    started: float  # seconds since the epoch
    ended: float
    code: int  # the launcher's exit status
    cause: str  # the launcher's words ("" after success)
    hosts: list[str]  # the hosts that ran a role
    workers: int
    resumed_from: str | None  # the newest checkpoint under the checkpoint root when the attempt started
    lost_s: float  # failed: from the newest checkpoint's save (or the start, when later) to the failure


def check_restart_inputs(job: TrainJob, own_disks: bool = False) -> None:
    """What a restart on fewer workers needs, checked before anything starts: the training list its worker lists
    are split from, and hosts that share the videos (``own_disks``: each host holds only its own workers' staged
    videos, so the hosts that remain could not train a dropped one's). ClipflowError naming the settings and the
    way out."""
    policy, workers = job.policy, job.plan.num_workers
    if own_disks and policy.max_restarts and policy.fewest_workers(workers) < workers:
        raise ClipflowError(
            f"train.min_workers {policy.min_workers} lets a restart go on with fewer than the plan's {workers} "
            "workers, but the hosts have their own disks (storage local): each holds only its own workers' videos, "
            "so the others could not go on with a dropped host's share; set train.min_workers to the worker count "
            "(restarts then need every host back), or use shared storage"
        )
    if policy.max_restarts and policy.fewest_workers(workers) < workers and job.paths.train_list is None:
        raise ClipflowError(
            f"train.min_workers {policy.min_workers} lets a restart go on with fewer than the plan's {workers} "
            "workers, whose lists are split from the training list, but none was given: give --train-list (the "
            "workflow passes it), or set train.min_workers to the worker count, or train.max_restarts to 0"
        )


def restartable(ending: Ending) -> bool:
    """A role failed: not a success, not a stop on notice (RESUMABLE), not a signal to the launcher."""
    return ending.failed and ending.code != RESUMABLE


def reachable_hosts(plan: Plan, log=print) -> list[Host]:
    """The hosts of ``plan`` that answer now (ssh: a login with the job's key and ``true`` within
    :data:`HOST_CHECK_S`, the host keys pinned; other launchers: all of them)."""
    hosts = plan.host_list()
    if plan.launcher != "ssh":
        return hosts
    from invoke.exceptions import Failure, ThreadException

    from clipflow.hosts.ssh import connect

    settings = replace(plan.ssh_settings(), connect_timeout=HOST_CHECK_S, accept_new=False)
    there = []
    for host in hosts:
        try:
            with connect(host, settings) as conn:
                conn.run("true", hide=True, timeout=HOST_CHECK_S)
            there.append(host)
        except (ClipflowError, Failure, ThreadException, OSError, EOFError) as exc:
            log(f"clipflow: restart: {host} does not answer ({str(exc).splitlines()[0][:200]})")
    return there


def role_host(host: Host) -> str:
    """``host`` as the plan's roles name it."""
    return str(replace(host, slots=1))


def shrunk_plan(plan: Plan, there: list[Host]) -> Plan:
    """The plan on the hosts ``there`` (of ``plan``'s), each with the workers it had (as slots, placement
    beside), the servers the remaining hosts had (at least one), the same port and keys."""
    workers = {role_host(h): len(plan.worker_ranks(role_host(h))) for h in there}
    hosts = [replace(h, slots=workers[role_host(h)]) for h in there if workers[role_host(h)]]
    servers = sum(1 for r in plan.roles if r.role == "server" and r.host in workers)
    ssh = {"ssh_key": plan.ssh_key, "known_hosts": plan.known_hosts, "python": plan.python, "workdir": plan.workdir}
    return make_plan(plan.launcher, hosts, sum(workers.values()), max(servers, 1), plan.root_port,
                     plan.heartbeat_timeout, plan.security, plan.keys_dir, "beside",
                     ssh if plan.launcher == "ssh" else None)  # fmt: skip


def job_on(job: TrainJob, plan: Plan) -> tuple[TrainJob, Path]:
    """``job`` on the smaller ``plan``: its worker lists split anew from the training list and the job written,
    both in ``<checkpoint_root>/splits-<W>w/``; the job and its file."""
    if job.paths.train_list is None:  # check_restart_inputs refuses this before the first launch
        raise ClipflowError("a restart on fewer workers needs the training list (--train-list)")
    folder = job.paths.checkpoint_root / f"splits-{plan.num_workers}w"
    write_splits(job.paths.train_list, plan.num_workers, job.seed, folder, job.recipe["data"]["split_fill"])
    smaller = replace(job, plan=plan, paths=replace(job.paths, splits_dir=folder))
    return smaller, smaller.write(Made(folder, "--checkpoint-root"))


def newest_checkpoint(root: Path) -> Path | None:
    """The run's newest checkpoint in ``root`` (the store's order; not one in a set-aside folder)."""
    store = CheckpointStore(root)
    points = store.points()
    return store.path(*points[-1]) if points else None


class History:
    """``<checkpoint_root>/restarts.jsonl``: the attempts of every launch of the run, one JSON line each."""

    def __init__(self, root: Path, log=print) -> None:
        self.root = root
        self.path = root / RESTARTS_FILE
        made = Made(root, "--checkpoint-root")
        made.check([], journals=[RESTARTS_FILE])  # someone else's file of that name is refused, never replaced
        made.journal(RESTARTS_FILE)
        open_for_append(self.path, log)  # a cut last line set aside: the next attempt goes on a line of its own

    def add(self, attempt: Attempt) -> None:
        old = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        write_text_with_checksum(self.path, old + json.dumps(asdict(attempt)) + "\n")


def read_attempts(path: Path) -> list[dict]:
    """The attempts a ``restarts.jsonl`` records (a cut last line left out, with a note); ClipflowError naming
    the file and the line when a whole line is not JSON or not an attempt."""
    attempts = []
    for number, record in record_lines(path, "restarts record", EXPECTED):
        missing = [key for key in FIELDS if key not in record]
        if missing:
            raise ClipflowError(f"restarts record {path} line {number} is not an attempt (it has no "
                                f"{', '.join(missing)}); expected {EXPECTED}")  # fmt: skip
        attempts.append(record)
    return attempts


def run_with_restarts(job: TrainJob, attempt: Attempt_, log=print) -> int:
    """Runs ``attempt`` for ``job``, then again after each failure as the module's docstring says; the last
    attempt's exit status."""
    root = job.paths.checkpoint_root
    history = History(root, log)
    launch, limit = time.time(), job.policy.max_restarts
    fewest = job.policy.fewest_workers(job.plan.num_workers)
    current, current_file = job, None
    relaunch: Path | None = None  # the job file of a relaunch on every host, when it differs from the first's
    number = 1
    while True:
        resumed = newest_checkpoint(root)
        started = time.time()
        ending = attempt(current, current_file)
        ended = time.time()
        saved = newest_checkpoint(root)
        lost = 0.0
        if ending.code:
            since = max(saved.stat().st_mtime, started) if saved else started
            lost = max(ended - since, 0.0)
        history.add(Attempt(launch, number, started, ended, ending.code, ending.cause, current.plan.role_hosts(),
                            current.plan.num_workers, None if resumed is None else str(resumed.relative_to(root)),
                            round(lost, 3)))  # fmt: skip
        if not restartable(ending) or number > limit:
            if restartable(ending) and limit:
                log(f"clipflow: restart: no restarts left ({limit} of {limit} made); the last failure: {ending.cause}")
            return ending.code
        os.environ.pop(NAMES["fault_kill"], None)  # fault injection is for the first attempt only
        if job.policy.resume != "auto":  # "never" was for the first attempt: a restart goes on from its checkpoints
            job = replace(job, policy=replace(job.policy, resume="auto"))
            relaunch = job.write(Made(root / "relaunch", "--checkpoint-root"))
        there = reachable_hosts(job.plan, log)
        kept = {role_host(h) for h in there}
        dropped = [h for h in job.plan.role_hosts() if h not in kept]
        workers = sum(len(job.plan.worker_ranks(h)) for h in kept)
        if workers < fewest:
            log(f"clipflow: restart: after {ending.cause}, {workers} workers remain on the hosts that answer "
                f"({', '.join(sorted(kept)) or 'none'}; gone: {', '.join(dropped)}), fewer than train.min_workers "
                f"{fewest}: no restart")  # fmt: skip
            return ending.code
        if dropped:
            current, current_file = job_on(job, shrunk_plan(job.plan, there))
        else:
            current, current_file = job, relaunch
        going_on = newest_checkpoint(root)
        log(f"clipflow: restart {number} of {limit} after: {ending.cause}; hosts kept: "
            f"{', '.join(current.plan.role_hosts())}; dropped: {', '.join(dropped) or 'none'}; "
            f"{current.plan.num_workers} workers; from checkpoint "
            f"{going_on.relative_to(root) if going_on else 'none (a fresh start)'}")  # fmt: skip
        number += 1
