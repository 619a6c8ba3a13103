"""A run on hosts with their own disks (``cluster.storage: local``): what goes to them before the roles start
and what comes home after.

Every host keeps the run in its own folder, ``<cluster.job_dir>/<run>`` (the roles' working folder there): the
job file, its workers' lists, the val list, and on rank 0's host the checkpoints, history, best model, TensorBoard
files and final model. Before a start the launcher puts the small files there
(:func:`clipflow.launch.push.push_job_files`) and makes sure the newest valid checkpoint of the run, wherever it
is (on any host of the plan, or the copy at home), is on the host that runs rank 0 now
(:func:`place_newest_checkpoint`): a plan whose first host changed still resumes. After a run, rank 0's final
model and history come home checked against their sha256 (:func:`fetch_outputs`); after a failure, its newest
checkpoint does (:func:`keep_home_copy`), so a host lost later loses nothing.
"""

from __future__ import annotations

from pathlib import Path

from clipflow.checksums import SUFFIX, recorded_beside, sha256_of
from clipflow.errors import ClipflowError
from clipflow.hosts.files import LocalFiles, SftpFiles
from clipflow.hosts.remote_record import check_ours, read_record, write_record
from clipflow.hosts.transfer import fetch_checked, push_checked
from clipflow.launch.push import open_remote
from clipflow.train.checkpoint import (
    RUN_FILES,
    CheckpointStore,
    checkpoint_name,
    entry_of,
    point_order,
    points_there,
)
from clipflow.train.job import TrainJob


def newest_point(where: SftpFiles | LocalFiles, folder: str) -> tuple[int, int] | None:
    points = points_there(where, folder)  # the run's, as the folder's record names them
    return points[-1] if points else None


def carry_run(source: SftpFiles | LocalFiles, folder: str, point: tuple[int, int], home: Path) -> None:
    """The checkpoint ``point`` and the run's files beside it, from ``source``'s ``folder`` into ``home``, each
    checked against its sha256 and recorded as the run's; a file at home of one of those names that is not the
    run's is moved aside first, never replaced."""
    store = CheckpointStore(home)
    names = source.names(folder)
    copied: dict[str, str] = {}
    try:
        for name in [checkpoint_name(*point), *(n for n in RUN_FILES if n in names and n + SUFFIX in names)]:
            store.make_way(name)
            copied[name] = fetch_checked(source, f"{folder}/{name}", home / name)
    finally:  # what did come is the run's, even when a later copy fails
        if copied:
            store.record_copies(copied)


def place_newest_checkpoint(home_job: TrainJob, host_job: TrainJob, log=print) -> None:
    """The newest checkpoint of the run on any host of the plan or at home, valid (its sha256 checked on the way),
    put on the host of rank 0 with the run's files beside it, unless that host holds it already."""
    plan = home_job.plan
    home = home_job.paths.checkpoint_root
    remote = str(host_job.paths.checkpoint_root)
    target = plan.rank0_host()
    found: list[tuple[tuple[int, int], str]] = []
    for host in plan.role_hosts():
        try:
            where = open_remote(plan, host)
        except ClipflowError as exc:
            log(f"clipflow: resume: cannot look for checkpoints on {host} ({exc})")
            continue
        try:
            point = newest_point(where, remote)
        finally:
            where.close()
        if point is not None:
            found.append((point, host))
    at_home = newest_point(LocalFiles("home", Path.cwd()), str(home))
    if at_home is not None:
        found.append((at_home, "home"))
    if not found:
        log(f"clipflow: resume: no checkpoint of this run on any host nor at home ({home}): a fresh start")
        return
    found.sort(key=lambda item: (point_order(item[0]), item[1] == target))  # rank 0's own copy wins a tie
    for point, where_from in reversed(found):
        name = checkpoint_name(*point)
        if where_from == target:
            log(f"clipflow: resume: the newest checkpoint, {name}, is on rank 0's host {target}")
            return
        try:
            if where_from != "home":
                source = open_remote(plan, where_from)
                try:
                    carry_run(source, remote, point, home)
                finally:
                    source.close()
            destination = open_remote(plan, target)
            try:
                at_home = CheckpointStore(home)
                carried = [home / name, *(home / f for f in RUN_FILES if at_home.is_runs(f))]
                record = read_record(destination, remote, "the run's checkpoint folder")
                check_ours(destination, remote, record, [f"{remote}/{p.name}" for p in carried], "move it away there")
                for local in carried:
                    push_checked(destination, local, f"{remote}/{local.name}")
                # the run's store there resumes from recorded checkpoints only
                record.update({p.name: entry_of(p.name, recorded_beside(p) or sha256_of(p)) for p in carried})
                write_record(destination, remote, record)
            finally:
                destination.close()
        except ClipflowError as exc:
            log(f"clipflow: resume: {name} from {where_from} cannot be used ({exc}); trying an older one")
            continue
        origin = f"at home ({home})" if where_from == "home" else f"on {where_from}"
        log(f"clipflow: resume: the newest checkpoint, {name}, was {origin}; placed on rank 0's host {target}")
        return


def fetch_outputs(home_job: TrainJob, host_job: TrainJob, log=print) -> None:
    """Rank 0's final model and history, from its host to the paths the workflow declared, checked."""
    where = open_remote(home_job.plan, home_job.plan.rank0_host())
    try:
        fetch_checked(where, str(host_job.paths.model_out), home_job.paths.model_out)
        fetch_checked(where, str(host_job.paths.metrics_out), home_job.paths.metrics_out)
    finally:
        where.close()
    log(f"clipflow: the final model and history came home from {where.host}: {home_job.paths.model_out}")


def keep_home_copy(home_job: TrainJob, host_job: TrainJob, log=print) -> None:
    """After a failure: rank 0's newest checkpoint and the run's files, home (best effort: said, never raised)."""
    remote = str(host_job.paths.checkpoint_root)
    try:
        where = open_remote(home_job.plan, home_job.plan.rank0_host())
    except ClipflowError as exc:
        log(f"clipflow: no copy of the newest checkpoint made at home ({exc})")
        return
    try:
        point = newest_point(where, remote)
        if point is not None:
            carry_run(where, remote, point, home_job.paths.checkpoint_root)
            log(f"clipflow: a copy of {checkpoint_name(*point)} from {where.host} is kept at home in "
                f"{home_job.paths.checkpoint_root}")  # fmt: skip
    except (ClipflowError, OSError) as exc:
        log(f"clipflow: no copy of the newest checkpoint made at home ({exc})")
    finally:
        where.close()
