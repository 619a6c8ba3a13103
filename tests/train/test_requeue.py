"""A training job stopped on notice on the real cluster of tests/slurm_cluster.py and requeued by its launcher
(`train.on_notice: requeue`): the next allocation of the same job id resumes from the checkpoint the workers made
inside the epoch and ends with the weights and losses of an unbroken run of the same job on the same nodes. Slurm
sends its time-limit warning (SIGUSR1) to every task of the job's steps; here it is sent with `scancel --signal`
at the hardest moment, while the workers still start. A job past a real time limit, requeued by the launcher until
the workflow ends: tests/workflow/test_slurm.py."""

from __future__ import annotations

import json
import re

import pytest
import torch
from launch_helpers import TINY
from netns_hosts import wait_until
from slurm_helpers import role_pid, sbatch, three_splits, train_script

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]

# two epochs, dropout drawn per worker and step (the same after a resume), no checkpoint but the notice's
RECIPE = {**TINY, "model": {"dropout": 0.5}, "train": {**TINY["train"], "epochs": 2, "save_every_iters": 0}}
ALLOCATION = "clipflow test: allocation"
STOPPED = re.compile(r"stopped on notice at epoch (\d+) iteration (\d+); checkpoint ([^;\s]+)")


def announced(script):
    """The batch script, saying first which allocation of the job runs it (Slurm counts requeues)."""
    head, rest = script.read_text().split("\n", 1)
    line = f'echo "{ALLOCATION} ${{SLURM_RESTART_COUNT:-0}} of job $SLURM_JOB_ID on $(hostname) at $(date +%s)"'
    script.write_text(f"{head}\n{line}\n{rest}")
    return script


def weights(folder) -> dict[str, torch.Tensor]:
    return torch.load(folder / "model.pt", weights_only=True)["model"]


def losses(folder) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def usr1_mask(pid: int | None) -> dict[str, bool]:
    """How process ``pid`` treats SIGUSR1 (signal 10): blocked (a worker still starting, its notice held), ignored
    (the scheduler and servers, by the bare Python before them) or caught (a handler in place); all false while
    the task has not yet reached the bare Python's first line (a signal would end it)."""
    status = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
    return {name: bool(int(status[field], 16) & 1 << (10 - 1))
            for name, field in (("blocked", "SigBlk"), ("ignored", "SigIgn"), ("caught", "SigCgt"))}  # fmt: skip


def test_a_notice_while_the_workers_start_is_held_then_the_requeued_job_ends_with_the_unbroken_weights(
    slurm, tmp_path, tiny_videos
):
    """Slurm's warning can reach a job's tasks seconds after its start (slurmctld sends it at its first look after
    it is due), while the workers still import torch: they start held (SIGUSR1 blocked by a bare Python before the
    worker's own), take it once their handler is in place, stop after one step and the job is requeued; its next
    allocation resumes there and ends with the weights and losses of an unbroken run of the job beside it."""
    splits = three_splits(tmp_path, tiny_videos)
    whole, chain = tmp_path / "whole", tmp_path / "chain"
    scripts = {}
    for folder in (whole, chain):
        folder.mkdir()
        scripts[folder] = announced(train_script(folder, tiny_videos, splits, overrides=RECIPE))
    threads = "--export=ALL,CLIPFLOW_TORCH_THREADS=1"  # two jobs share each node's two cores
    unbroken = sbatch(slurm, scripts[whole], threads)
    job = sbatch(slurm, scripts[chain], threads, "--requeue", "--open-mode=append")

    roles = [(0, "scheduler", 0), *((i, role, i) for i in range(3) for role in ("server", "worker"))]

    def started() -> bool:  # every role's task exists on its node and is past the bare Python's first line (a
        # worker's still importing torch); before that line a task dies of the signal, a window of some ms that
        # CI's loaded machine once hit (worker 2 died, exit 138) when the test sent the notice at the tasks' exec
        pids = [role_pid(slurm, *role, job=job) for role in roles]
        try:
            return all(pid is not None and any(usr1_mask(pid).values()) for pid in pids)
        except OSError:  # a task ended meanwhile
            return False

    assert wait_until(started, 120, 0.05), (chain / "job.out").read_text()
    held = [i for i in range(3) if usr1_mask(role_pid(slurm, i, "worker", i, job=job))["blocked"]]
    assert held, "every worker had its handler in place already: the notice would not come while they start"
    slurm.run(["scancel", "--signal=USR1", job])  # to every task of every step, as the time-limit warning
    info = slurm.wait_job(job, 400)
    out = (chain / "job.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    assert "User defined signal" not in out and "exit code 138" not in out, out  # no worker died of it
    first, second = out.split(ALLOCATION)[1:]
    stop = STOPPED.search(first)
    assert stop is not None and stop.group(1) == "1", first
    assert "exit 79: resumable" in first and f"requeued Slurm job {job} (requeue 1)" in first, first
    assert f"resumed from checkpoint {stop.group(3)} (epoch 1, iteration {stop.group(2)}" in second, second
    assert re.fullmatch(rf".*/epoch_0001_iter_{int(stop.group(2)):06d}\.pt", stop.group(3)), first
    assert slurm.wait_job(unbroken, 400)["JobState"] == "COMPLETED", (whole / "job.out").read_text()
    a, b = weights(whole), weights(chain)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert losses(chain) == losses(whole)
    slurm.wait_quiet()
