"""A training job whose Slurm time limit is shorter than its training, on the real cluster of
tests/slurm_cluster.py: `sbatch --time=2 --signal=USR1@40 --requeue`.
Slurm sends SIGUSR1 to every process of the job's steps (the roles) about 40 s before the limit; the workers finish
their step, rank 0 checkpoints inside the epoch, all exit 79; the launcher then requeues the job
(`train.on_notice: requeue`), and the next allocation of the same job id resumes from that checkpoint, as many times
as it takes, ending with the weights of an unbroken run of the same job on the same nodes."""

from __future__ import annotations

import json
import re

import pytest
import torch
from launch_helpers import TINY, scanned
from netns_hosts import wait_until
from slurm_helpers import role_pid, sbatch, three_splits, train_script

from clipflow.data.listfile import write_list

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]

# 3 workers x 4 videos listed 10 times, batch 2: 20 steps an epoch, 320 in all, about two minutes here with the
# chain's sleeps while the unbroken run shares the cores; the launcher's notice comes 80 s into the job (the 120 s
# limit less 40 s; Slurm's own up to 30 s later: slurmctld looks at time limits every 30 s), so the first
# allocation is stopped and the second most often finishes (a third one is taken as well). Dropout is drawn per
# worker and step, the same after a resume.
REPEATS = 10
RECIPE = {**TINY, "model": {"dropout": 0.5}, "train": {**TINY["train"], "epochs": 16, "save_every_iters": 0}}
TWO_EPOCHS = {**TINY, "train": {**TINY["train"], "epochs": 2, "save_every_iters": 0}}
ALLOCATION = "clipflow test: allocation"
STOPPED = re.compile(r"stopped on notice at epoch (\d+) iteration (\d+); checkpoint ([^;\s]+)")


def announced(script):
    """The batch script, saying first which allocation of the job runs it (Slurm counts requeues)."""
    head, rest = script.read_text().split("\n", 1)
    line = f'echo "{ALLOCATION} ${{SLURM_RESTART_COUNT:-0}} of job $SLURM_JOB_ID on $(hostname) at $(date +%s)"'
    script.write_text(f"{head}\n{line}\n{rest}")
    return script


def repeated_splits(tmp_path, tiny_videos):
    """worker0..2.lst: 4 of the tiny set's videos each, every one listed REPEATS times; their folder."""
    entries, splits = scanned(tiny_videos), tmp_path / "splits"
    for rank in range(3):
        write_list(splits / f"worker{rank}.lst", entries[rank * 4 : (rank + 1) * 4] * REPEATS)
    return splits


def weights(folder) -> dict[str, torch.Tensor]:
    return torch.load(folder / "model.pt", weights_only=False)["model"]


def losses(folder) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_job_past_its_time_limit_is_stopped_on_notice_requeued_and_ends_with_the_unbroken_weights(
    slurm, tmp_path, tiny_videos
):
    splits = repeated_splits(tmp_path, tiny_videos)
    whole, chain = tmp_path / "whole", tmp_path / "chain"
    scripts = {}
    for folder in (whole, chain):
        folder.mkdir()
        scripts[folder] = announced(
            train_script(folder, tiny_videos, splits, "--backend", "ddp", "--slurm-notice", "40", overrides=RECIPE)
        )
    threads = "--export=ALL,CLIPFLOW_TORCH_THREADS=1"  # two jobs share each node's two cores
    unbroken = sbatch(slurm, scripts[whole], threads)  # no time limit (the partition has none)
    # the chain's workers sleep 0.3 s after each of their 320 steps (20 an epoch): 96 s, more than the at most 80 s
    # a two-minute job trains before its notice, whatever the CPU (the weights stay: the sleep changes no number).
    # Two minutes, not Slurm's smallest one: on a loaded machine the roles' start alone took the 20 s a one-minute
    # job has before a 40 s notice, and every allocation stopped after one step until the job timed out.
    slow = f"{threads},CLIPFLOW_FAULT_STEP_S=0.3"
    limited = sbatch(slurm, scripts[chain], slow, "--time=2", "--signal=USR1@40", "--requeue", "--open-mode=append")
    assert slurm.wait_job(unbroken, 400)["JobState"] == "COMPLETED", (whole / "job.out").read_text()
    info = slurm.wait_job(limited, 900)
    out = (chain / "job.out").read_text()
    print(out)
    assert info["JobState"] == "COMPLETED", out
    allocations = out.split(ALLOCATION)[1:]
    assert len(allocations) >= 2 and int(info["Restarts"]) == len(allocations) - 1, out
    starts = []
    for number, text in enumerate(allocations):
        assert text.startswith(f" {number} of job {limited} "), out
        starts.append(int(text.split(" at ", 1)[1].split()[0]))
    print("allocations started at", [s - starts[0] for s in starts], "s")  # pytest -s: the requeue waits
    for before, after in zip(allocations, allocations[1:], strict=False):
        stop = STOPPED.search(before)  # the launcher's line (a worker says it too, the same)
        assert stop is not None, before
        epoch, iteration, path = stop.groups()
        assert re.fullmatch(rf".*/epoch_{int(epoch):04d}_iter_{int(iteration):06d}\.pt", path), before
        assert "exit 79: resumable" in before, before
        assert f"clipflow launch: requeued Slurm job {limited} (requeue " in before, before
        assert f"resumed from checkpoint {path} (epoch {epoch}, iteration {iteration}" in after, after
    last = allocations[-1]
    assert "stopped on notice" not in last and "not requeued" not in out, out
    a, b = weights(whole), weights(chain)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert losses(chain) == losses(whole)
    slurm.wait_quiet()


def usr1_mask(pid: int | None) -> dict[str, bool]:
    """How process ``pid`` treats SIGUSR1 (signal 10): blocked (a worker still starting, its notice held), ignored
    (the scheduler and servers, by the bare Python before them) or caught (a handler in place); all false while
    the task has not yet reached the bare Python's first line (a signal would end it)."""
    status = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
    return {name: bool(int(status[field], 16) & 1 << (10 - 1))
            for name, field in (("blocked", "SigBlk"), ("ignored", "SigIgn"), ("caught", "SigCgt"))}  # fmt: skip


def test_a_notice_while_the_workers_start_on_their_nodes_waits_for_their_handlers_then_the_job_is_requeued(
    slurm, tmp_path, tiny_videos
):
    """Slurm's warning can reach a job's tasks seconds after its start (slurmctld sends it at its first look after
    it is due), while the workers still import torch: they start held (SIGUSR1 blocked by a bare Python before the
    worker's own), take it once their handler is in place, stop after one step and the job is requeued."""
    script = announced(train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos), overrides=TWO_EPOCHS))
    job = sbatch(slurm, script, "--requeue", "--open-mode=append")

    roles = [(0, "scheduler", 0), *((i, role, i) for i in range(3) for role in ("server", "worker"))]

    def started() -> bool:  # every role's task exists on its node and is past the bare Python's first line (a
        # worker's still importing torch); before that line a task dies of the signal, a window of some ms that
        # CI's loaded machine once hit (worker 2 died, exit 138) when the test sent the notice at the tasks' exec
        pids = [role_pid(slurm, *role) for role in roles]
        try:
            return all(pid is not None and any(usr1_mask(pid).values()) for pid in pids)
        except OSError:  # a task ended meanwhile
            return False

    assert wait_until(started, 120, 0.05), (tmp_path / "job.out").read_text()
    held = [i for i in range(3) if usr1_mask(role_pid(slurm, i, "worker", i))["blocked"]]
    assert held, "every worker had its handler in place already: the notice would not come while they start"
    slurm.run(["scancel", "--signal=USR1", job])  # to every task of every step, as the time-limit warning
    info = slurm.wait_job(job, 400)
    out = (tmp_path / "job.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    assert "User defined signal" not in out and "exit code 138" not in out, out  # no worker died of it
    first, second = out.split(ALLOCATION)[1:]
    stop = STOPPED.search(first)
    assert stop is not None and stop.group(1) == "1", first
    assert "exit 79: resumable" in first and f"requeued Slurm job {job} (requeue 1)" in first, first
    assert f"resumed from checkpoint {stop.group(3)} (epoch 1, iteration {stop.group(2)}" in second, second
    slurm.wait_quiet()
