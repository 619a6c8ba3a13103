"""Starting a job's processes on the hosts: `clipflow train launch`, `clipflow evaluate launch` and
`clipflow launch` (MXNet's launch.py).

:func:`launch_workers` runs ``python -m clipflow COMMAND`` on every worker of a plan (and, on the parameter
server, its scheduler and servers) until the first failure; :func:`launch_training` writes the training job
(:mod:`clipflow.train.job`) and starts its workers with that file and their rank; :func:`launch_program` does
launch.py's job for any program: a plan from a :class:`LaunchConfig`, the working folder synced, a scheduler,
servers and workers running the program with the DMLC_* variables set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from clipflow.cluster.hostsfile import Host, parse_host
from clipflow.cluster.plan import Plan, Role, check_ports, check_security, make_plan, ssh_fields
from clipflow.cluster.slurm import check_slurm_launch
from clipflow.cluster.ssh import SshSettings
from clipflow.cluster.staged import Staged, read_staged
from clipflow.cluster.sync import sync_host
from clipflow.data.listfile import read_list
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir, check_output_file
from clipflow.ps.exitcodes import RESUMABLE
from clipflow.recipe import check_span_in_lists
from clipflow.train.job import JOB_FILE, TrainJob
from clipflow.train.launcher import (
    FORWARD_NOTICE,
    TRAIN_NOTICE,
    Ending,
    Launcher,
    NoticePolicy,
    RoleCommand,
    program_problem,
)
from clipflow.train.requeue import requeue_after_notice
from clipflow.train.restarts import check_restart_inputs, newest_checkpoint, run_with_restarts
from clipflow.train.resume_check import check_resume, job_facts, listed_iterations, set_aside
from clipflow.train.roles import role_commands
from clipflow.train.slots import Layout, decide
from clipflow.train.slurm_deadline import notice_deadline

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
    plan's nodes (:func:`clipflow.cluster.slurm.check_slurm_launch`)."""
    if plan.launcher == "slurm":
        check_slurm_launch(parse_host(host, "the plan").host for host in plan.role_hosts())


def run_workers(plan: Plan, command: Command, backend: str, log_dir: str, grace: float, host_logs: bool,
                workdir: str = "", stop_grace: float | None = None,
                deadline: float | None = None) -> Ending:  # fmt: skip
    """:func:`launch_workers`, telling how the launch ended (:class:`clipflow.train.launcher.Ending`).
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
    before the end (:mod:`clipflow.train.slurm_deadline`); 0: only Slurm's signal does."""
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
        found = check_resume(job.paths.checkpoint_root, job_facts(job, listed_iterations_of(job)), job.policy.resume)
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


@dataclass(frozen=True)
class HostRun:
    """Where a run lives on hosts with their own disks: its ``folder`` on every host (``<cluster.job_dir>/<run>``,
    maybe ``~/``-relative) and the staged data (:class:`clipflow.cluster.staged.Staged`)."""

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


def launch_on_own_disks(job: TrainJob, local: HostRun, log_dir: str, grace: float) -> Ending:
    """Training on hosts with their own disks: the job as the hosts run it (:meth:`TrainPaths.on_host`) written
    here beside the checkpoints and put with the lists in the run's folder on every host, the newest checkpoint
    placed on rank 0's host, the roles started there; then the outputs come home (or, after a failure, a copy of
    the newest checkpoint)."""
    from clipflow.train import host_run

    local.staged.check_hosts(job.plan.role_hosts(), "train launch")
    keys = host_run.key_files(job.plan, f"{local.folder}/ps_keys")  # the roles read the job's keys there
    plan = replace(job.plan, keys_dir=f"{local.folder}/ps_keys" if keys else "")
    remote = replace(job, plan=plan, paths=job.paths.on_host(local.folder, local.staged.root()))
    job_file = remote.write(job.made())

    def files(host: str) -> dict[str, Path]:
        wanted = {f"{local.folder}/{JOB_FILE}": job_file, **keys}
        wanted.update({str(remote.paths.shard(rank)): job.paths.shard(rank) for rank in plan.worker_ranks(host)})
        if job.paths.val_list is not None and remote.paths.val_list is not None:
            wanted[str(remote.paths.val_list)] = job.paths.val_list
        if job.paths.train_list is not None and remote.paths.train_list is not None:  # rank 0's resume check
            wanted[str(remote.paths.train_list)] = job.paths.train_list
        return wanted

    host_run.push_job_files(plan, files)
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
    if config.sync_dst_dir and config.launcher == "ssh":
        for host in config.hosts:
            sync_host(Path.cwd(), host, config.sync_dst_dir, config.ssh)
    commands = role_commands(plan, list(command), dict(config.env or {}), program_roles=config.mxnet)
    notice = NoticePolicy(signals=FORWARD_NOTICE, seconds=config.grace)
    return Launcher(commands, config.log_dir, grace_s=config.grace, notice=notice).run()
