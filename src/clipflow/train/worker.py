"""One training worker: started by the launcher as ``clipflow train worker --job FILE --rank R``.

It reads the job (:class:`clipflow.train.job.TrainJob`, checked as it is read), sets its torch threads and its
device, joins the back end (the parameter server's key-value store, or a torch.distributed group) with its
rank, and runs the :class:`clipflow.train.trainer.Trainer` to the end, or to a stop on notice (SIGUSR1 or
SIGTERM: :mod:`clipflow.launch.notice`), after which it exits RESUMABLE. Where the other processes are comes from
the variables the launcher sets (DMLC_* for the parameter server, MASTER_ADDR/MASTER_PORT and WORLD_SIZE for
torch.distributed, as MXNet's and torchrun's workers find them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from clipflow.environment import read_env
from clipflow.errors import RESUMABLE
from clipflow.launch.notice import Notice, StoppedOnNotice
from clipflow.train.checkpoint import telling_resume
from clipflow.train.comm import DDPConfig, PSComm, run_in_group
from clipflow.train.device import worker_device
from clipflow.train.job import TrainJob
from clipflow.train.loader_sizing import worker_cores


def bootstrap() -> torch.device:
    """What every worker process does first (training or evaluation): its torch threads, then its device."""
    set_torch_threads()
    return worker_device()


def set_torch_threads() -> int:
    """A worker's torch threads: CLIPFLOW_TORCH_THREADS, else its share of the CPUs it may run on
    (CLIPFLOW_WORKERS_ON_HOST workers share them: :func:`clipflow.train.loader_sizing.worker_cores`, which sizes
    its loader from the same share); returns the count."""
    env = read_env()
    threads = env.torch_threads or worker_cores(env.workers_on_host)
    torch.set_num_threads(threads)
    return threads


def run_worker(job_path: str | Path, rank: int) -> int:
    """Trains worker ``rank``'s share of the job in ``job_path``; the process's exit status (RESUMABLE after a
    stop on notice)."""
    notice = Notice.install()  # first: a notice from now on is a clean stop after a step
    try:
        return _train_share(Path(job_path), rank, notice)
    finally:
        notice.retire()  # a late notice must not kill the worker on its way out


def _train_share(job_path: Path, rank: int, notice: Notice) -> int:
    job = TrainJob.read(job_path.expanduser())
    job = dataclasses.replace(job, paths=job.paths.expanded())  # a host's own folder may be named from ~
    job.check_rank(rank)
    with telling_resume(job.paths.checkpoint_root):  # a full disk's message says what a rerun resumes from
        return _train(job, rank, notice)


def _train(job: TrainJob, rank: int, notice: Notice) -> int:
    device = bootstrap()
    from clipflow.train.trainer import Trainer  # here: evaluate workers bootstrap from this module too

    if job.backend == "ddp":
        try:
            return run_in_group("ddp", DDPConfig.from_env(rank=rank), device,
                                lambda comm: Trainer(job, comm, device, notice=notice).run())  # fmt: skip
        except StoppedOnNotice:  # the group was left cleanly on the way out
            return RESUMABLE
    from clipflow.ps import KVStore
    from clipflow.ps.env import PSConfig

    config = dataclasses.replace(PSConfig.from_env(), rank=rank)
    with KVStore.create(job.ps.mode, config) as kv:  # an exception tells the scheduler, which stops the others
        try:
            Trainer(job, PSComm(kv, job.ps), device, notice=notice).run()
        except StoppedOnNotice:  # a clean stop: the store closes as at the end (the scheduler and servers exit 0)
            return RESUMABLE
    return 0
