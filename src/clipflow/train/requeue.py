"""After a stop on notice inside a Slurm batch job: the job put back in Slurm's queue, so that its next allocation
goes on from the checkpoint the workers just wrote (``train.on_notice: requeue``).

The chain: a job submitted with ``--signal=USR1@<seconds>`` gets SIGUSR1 that long before its time limit (every
process of its steps: the roles, which `clipflow train launch` starts as srun steps; with ``B:`` the batch shell
only, which is the launcher when the script ``exec``\\ s it and which then passes the notice on); the workers finish
their step, rank 0 checkpoints inside the epoch and all exit RESUMABLE (79); then the launcher, here, runs
``scontrol requeue <job id>``. Slurm ends this allocation and queues the same job id again; the batch script runs
anew, the launch finds the checkpoint and resumes (``resumed from checkpoint ...``).

Why the launcher and not the batch script or Slurm: Slurm never requeues a job for its time limit (past it the
job ends TIMEOUT, whatever ``--requeue`` says), so something in the job must ask; the batch script of the Snakemake
executor plugin is not ours to change (nor one a user writes, who would have to know exit 79); and the launcher is
the one process that knows that every worker stopped on notice with a checkpoint, and where.

The job is requeued only when all of these hold, each refusal said in one line (the launcher still exits 79):

- ``SLURM_JOB_ID`` is set (outside Slurm a notice ends the run resumable, as it always did);
- Slurm has the job RUNNING: a job being cancelled (``scancel`` sends SIGTERM, a notice too) or past its limit
  is not put back;
- it is a batch job (``BatchFlag=1``; an ``salloc`` session cannot be requeued: rerun the command in a new one);
- it may be requeued (``Requeue=1``: not ``sbatch --no-requeue``, nor ``JobRequeue=0`` in slurm.conf without
  ``--requeue``);
- the job resumes (``train.resume: auto``; with ``never`` the next allocation would start afresh);
- this allocation made progress: its newest checkpoint is later than the one it started from. A notice before the
  first step still gets one step (the workers hold it until their handler is in place and agree on it after a
  step), but an allocation that ends where it began would loop for ever: the chain stops there, naming why.

A requeued job waits before it starts again: Slurm sets its begin time to the requeue plus the credential lifetime
(``AuthInfo=...,cred_expire=<s>``, 120 s by default) and one second, then starts it at the next scheduling pass.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from clipflow.hosts.slurm import SlurmCommandFailed, slurm_command
from clipflow.train.checkpoint import order_points, point_order

SAY = "clipflow launch: "


def job_facts(job_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """``scontrol show job`` of ``job_id`` as a dict (JobState, BatchFlag, Requeue, Restarts...)."""
    out = slurm_command(["scontrol", "show", "job", "--oneliner", job_id], env)
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def progressed(started_from: Path | None, stopped_at: Path | None) -> bool:
    """Whether the newest checkpoint at the stop is later than the one the allocation started from."""
    if stopped_at is None:
        return False
    if started_from is None:
        return True
    before, after = order_points([started_from.name]), order_points([stopped_at.name])
    return bool(after) and (not before or point_order(after[0]) > point_order(before[0]))


def requeue_after_notice(started_from: Path | None, stopped_at: Path | None, resume: str,
                         env: Mapping[str, str] | None = None, say=print) -> bool:  # fmt: skip
    """After a stop on notice (the launcher's exit RESUMABLE): requeue this Slurm batch job when the module's
    conditions hold; says what it did, or why not, in one line. ``resume``: the job's ``policy.resume``. Whether
    the job was requeued."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return False
    try:
        facts = job_facts(job_id, env)
    except SlurmCommandFailed as failed:
        say(f"{SAY}Slurm job {job_id} not requeued: {failed}; resubmit it to go on")
        return False
    state, why = facts.get("JobState", "?"), None
    if state != "RUNNING":
        why = f"Slurm has it {state} (cancelled or past its time limit), not RUNNING"
    elif facts.get("BatchFlag") != "1":
        why = "it is no batch job (salloc): rerun the same command in a new allocation to go on"
    elif facts.get("Requeue") != "1":
        why = "it may not be requeued (sbatch --no-requeue, or JobRequeue=0 without --requeue): resubmit it to go on"
    elif resume != "auto":
        why = f"train.resume is {resume}: the requeued job would start afresh; resubmit it with resume auto to go on"
    elif not progressed(started_from, stopped_at):
        where = started_from.name if started_from is not None else "no checkpoint"
        why = (f"this allocation made no progress (still at {where}), so a requeue could loop for ever: give the job "
               "a longer time limit or an earlier --signal, then resubmit it")  # fmt: skip
    if why is not None:
        say(f"{SAY}Slurm job {job_id} not requeued: {why}")
        return False
    # scontrol requeue makes Slurm end this allocation at once: SIGTERM to every process of the job, this one
    # included, which is about to exit anyway; ignored here so that the line below is still said
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        slurm_command(["scontrol", "requeue", job_id], env)
    except SlurmCommandFailed as failed:
        say(f"{SAY}Slurm job {job_id} not requeued: {failed}; resubmit it to go on")
        return False
    restarts = int(facts.get("Restarts", "0") or 0) + 1
    say(f"{SAY}requeued Slurm job {job_id} (requeue {restarts}): its next allocation resumes from "
        f"{stopped_at.name if stopped_at else 'its checkpoint'}")  # fmt: skip
    sys.stdout.flush()
    return True
