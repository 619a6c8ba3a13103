"""`clipflow train launch`: :func:`launch_training` writes the training job (:mod:`clipflow.train.job`), checks
every input and output once, and starts its workers with that file and their rank through the launcher
(:mod:`clipflow.launch.start`), relaunching as the job's restart policy allows (:mod:`clipflow.train.restarts`);
:func:`launch_on_own_disks` is the same on hosts with their own disks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from clipflow.data.listfile import read_list
from clipflow.errors import RESUMABLE
from clipflow.files import check_output_dir, check_output_file
from clipflow.launch.processes import Ending
from clipflow.launch.slurm_deadline import notice_deadline
from clipflow.launch.start import HostRun, job_command, run_workers
from clipflow.recipe import check_span_in_lists
from clipflow.train.checkpoint import CheckpointStore
from clipflow.train.job import JOB_FILE, TrainJob
from clipflow.train.requeue import requeue_after_notice
from clipflow.train.restarts import check_restart_inputs, newest_checkpoint, run_with_restarts
from clipflow.train.resume_check import check_resume, job_facts, listed_iterations, set_aside
from clipflow.train.slots import Layout, decide


def check_outputs(job: TrainJob, log_dir: str, *, job_given: bool = False) -> None:
    """Every path the run writes, checked before anything starts (the final model and metrics are written only
    after the last epoch): each a folder or a file as it will be used, there or makeable. ClipflowError naming
    the flag and the path. ``job_given``: the job file is the one the user launched (--job), kept as it is."""
    check_output_dir(log_dir, "--log-dir")
    check_output_dir(job.paths.checkpoint_root, "--checkpoint-root")
    if not job_given:
        job.made().check([JOB_FILE])  # someone else's job.json there is refused rather than replaced
    check_output_file(job.paths.model_out, "--model-out", "model.pt")
    check_output_file(job.paths.metrics_out, "--metrics-out", "metrics.jsonl")
    if job.paths.tensorboard is not None:
        check_output_dir(job.paths.tensorboard, "--tensorboard")


def launch_training(job: TrainJob, log_dir: str, grace: float, on_notice: str, source: Path | None = None,
                    local: HostRun | None = None, slurm_notice: float = 0.0) -> int:  # fmt: skip
    """Writes ``job`` beside its checkpoints and runs its workers from that file; the launcher's exit code.
    ``source``: the file the job was read from (--job); when it is that very file (a user may have edited it),
    the workers start from it as it is, never from a rewritten copy. ``local``: the hosts have their own disks
    (:func:`launch_on_own_disks`). After a failure the run is relaunched as the job's policy allows
    (:mod:`clipflow.train.restarts`): a smaller membership runs a job of its own, written with its worker lists
    in ``<checkpoint_root>/splits-<W>w/``. ``on_notice`` (``train.on_notice``): after a stop on notice inside a
    Slurm batch job, ``requeue`` asks Slurm to requeue it (:mod:`clipflow.train.requeue`), ``exit`` does not.
    ``slurm_notice``: inside a Slurm job with a time limit, the launcher gives the notice itself that many seconds
    before the end (:mod:`clipflow.launch.slurm_deadline`); 0: only Slurm's signal does."""
    if job.paths.val_list is not None:
        read_list(job.paths.val_list)  # a missing or broken val list, named before anything starts
    job_given = source is not None and source.resolve() == job.file.resolve()
    check_outputs(job, log_dir, job_given=job_given)
    if job.recipe["data"]["kind"] == "video":  # the clip's span against the scanned videos, before any worker
        shards = [job.paths.shard(rank) for rank in range(job.plan.num_workers)]
        lists = [path for path in [*shards, job.paths.val_list] if path is not None and path.is_file()]
        check_span_in_lists(job.recipe, lists, "the recipe")
    check_restart_inputs(job, own_disks=local is not None)
    if local is None:
        root = job.paths.checkpoint_root  # rank 0 looks again and names others' files there, once
        found = check_resume(root, job_facts(job, listed_iterations_of(job)), job.policy.resume,
                             store=CheckpointStore(root, name_others=False))  # fmt: skip
        if found is not None and "layout" in found[0]:  # a resize the policy refuses, named before any role starts
            train = job.recipe["train"]
            decide(Layout.of(found[0]["layout"]), job.plan.num_workers, train["batch_size"], train["accumulate"],
                   job.policy.global_batch)  # fmt: skip
    job_file = job.file if job_given or local is not None else job.write()
    deadline = notice_deadline(slurm_notice) if local is None else None

    def attempt(current: TrainJob, current_file: Path | None) -> Ending:
        if local is not None:
            return launch_on_own_disks(current, local, log_dir, grace)
        command = job_command("train", current_file or job_file)
        return run_workers(current.plan, command, current.backend, log_dir, grace, host_logs=True,
                           stop_grace=current.policy.stop_grace, deadline=deadline)  # fmt: skip

    started_from = newest_checkpoint(job.paths.checkpoint_root)
    code = run_with_restarts(job, attempt)
    if code == RESUMABLE and on_notice == "requeue":
        requeue_after_notice(started_from, newest_checkpoint(job.paths.checkpoint_root), job.policy.resume)
    return code


def listed_iterations_of(job: TrainJob) -> int | None:
    """Steps an epoch as rank 0's list gives them: what the launcher shows the learning rate at the resume point
    with (rank 0 counts again from its own list); None when that list is not here."""
    shard = job.paths.shard(0)
    if not shard.is_file():
        return None
    return listed_iterations(read_list(shard), job.recipe["train"]) or None


def init_from_on_host(job: TrainJob, folder: str) -> tuple[str, Path] | None:
    """Where rank 0's host keeps the recipe's ``train.init_from`` in the run's ``folder`` there (``init_from/`` and
    the file's name) and the file here; None when the recipe names none."""
    given = job.recipe["train"].get("init_from") or ""
    if not given:
        return None
    return f"{folder}/init_from/{Path(given).name}", Path(given).expanduser()


def launch_on_own_disks(job: TrainJob, local: HostRun, log_dir: str, grace: float) -> Ending:
    """Training on hosts with their own disks: the job as the hosts run it (:meth:`TrainPaths.on_host`) written
    here beside the checkpoints and put with the lists in the run's folder on every host, the recipe's
    ``train.init_from`` and the newest checkpoint placed on rank 0's host, the roles started there; then the
    outputs come home (or, after a failure, a copy of the newest checkpoint)."""
    from clipflow.launch import push
    from clipflow.train import host_run

    local.staged.check_hosts(job.plan.role_hosts(), "train launch")
    keys = push.key_files(job.plan, f"{local.folder}/ps_keys")  # the roles read the job's keys there
    plan = replace(job.plan, keys_dir=f"{local.folder}/ps_keys" if keys else "")
    weights = init_from_on_host(job, local.folder)  # rank 0 reads train.init_from from its own disk
    recipe = job.recipe
    if weights is not None:
        recipe = {**recipe, "train": {**recipe["train"], "init_from": weights[0]}}
    remote = replace(job, plan=plan, recipe=recipe, paths=job.paths.on_host(local.folder, local.staged.root()))
    job_file = remote.write(job.made())

    def files(host: str) -> dict[str, Path]:
        wanted = {f"{local.folder}/{JOB_FILE}": job_file, **keys}
        if weights is not None and host == plan.rank0_host():
            wanted[weights[0]] = weights[1]
        wanted.update({str(remote.paths.shard(rank)): job.paths.shard(rank) for rank in plan.worker_ranks(host)})
        if job.paths.val_list is not None and remote.paths.val_list is not None:
            wanted[str(remote.paths.val_list)] = job.paths.val_list
        if job.paths.train_list is not None and remote.paths.train_list is not None:  # rank 0's resume check
            wanted[str(remote.paths.train_list)] = job.paths.train_list
        return wanted

    push.push_job_files(plan, local.folder, files)
    if job.policy.resume == "never":  # rank 0 sets aside what its host holds; the copies at home go aside here
        set_aside(job.paths.checkpoint_root)
    else:
        host_run.place_newest_checkpoint(job, remote)
    command = job_command("train", f"{local.folder}/{JOB_FILE}")
    ending = run_workers(
        plan,
        command,
        job.backend,
        log_dir,
        grace,
        host_logs=True,
        workdir=local.folder,
        stop_grace=job.policy.stop_grace,
    )
    if ending.code == 0:
        host_run.fetch_outputs(job, remote)
    else:
        host_run.keep_home_copy(job, remote)
    return ending
