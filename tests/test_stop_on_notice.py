"""A stop on notice (SIGUSR1 or SIGTERM to `clipflow train launch`: a spot reclaim, Slurm's --signal=USR1@120):
every worker finishes its step, rank 0 checkpoints inside the epoch, all exit RESUMABLE (79) within the stop grace
with one line saying where, and the rerun ends with the weights of a run never stopped, on both back ends."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest
import torch
from launch_helpers import TINY, launch, launch_command, two_splits

from clipflow.ps.exitcodes import RESUMABLE

# 2 workers x 8 videos, batch 2: 4 iterations an epoch; dropout is drawn per worker and step (the same masks after
# the resume); no checkpoint inside an epoch but the notice's
RECIPE = {**TINY, "model": {"dropout": 0.5},
          "train": {**TINY["train"], "epochs": 2, "save_every_iters": 0, "keep_checkpoints": 10}}  # fmt: skip
STOP_GRACE = 60
STOPPED = re.compile(r"stopped on notice at epoch (\d+) iteration (\d+); checkpoint (\S+); rerun the same command")


def signalled_run(folder, tiny_videos, splits, signum, when, *extra: str):
    """A launch sent ``signum`` once a line of its output contains ``when``: its exit code, its output and the
    seconds from the signal to its exit."""
    argv, env = launch_command(folder, tiny_videos, splits, "--stop-grace", str(STOP_GRACE), *extra,
                               overrides=RECIPE, env_extra={"CLIPFLOW_PROGRESS_S": "0.001"})  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, sent_at = [], None
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if sent_at is None and when in line:
                proc.send_signal(signum)
                sent_at = time.monotonic()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sent_at is not None, "".join(lines)
    return code, "".join(lines), time.monotonic() - sent_at


def final_weights(folder) -> dict[str, torch.Tensor]:
    return torch.load(folder / "model.pt", weights_only=False)["model"]


def assert_equal_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_sigusr1_mid_epoch_stops_resumable_and_the_rerun_ends_with_the_unbroken_weights(tmp_path, tiny_videos,
                                                                                        backend):  # fmt: skip
    """SIGUSR1 at epoch 2's first progress line: exit 79 within the grace, the one line, a checkpoint inside epoch 2
    (the only one: save_every_iters 0); the rerun resumes there and ends torch.equal to an unbroken run."""
    splits = two_splits(tmp_path, tiny_videos, 8)
    whole = tmp_path / "whole"
    done = launch(whole, tiny_videos, splits, "--backend", backend, overrides=RECIPE)
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    code, out, took = signalled_run(stopped, tiny_videos, splits, signal.SIGUSR1, "] epoch 2/2:", "--backend", backend)
    assert code == RESUMABLE, out
    assert took < STOP_GRACE, out
    said = [line for line in out.splitlines() if line.startswith("clipflow launch: got SIGUSR1: stopped on notice")]
    assert len(said) == 1, out
    epoch, iteration, path = STOPPED.search(said[0]).groups()  # type: ignore[union-attr]
    assert epoch == "2" and 1 <= int(iteration) <= 4, said
    assert "clipflow: error" not in out  # a stop on notice is no failure
    folder = next(p for p in (stopped / "ckpt").iterdir() if p.is_dir())
    inside = sorted(p.name for p in folder.glob("*_iter_*.pt"))
    assert inside == [f"epoch_0002_iter_{int(iteration):06d}.pt"] and path == str(folder / inside[0]), out
    assert not (stopped / "model.pt").exists()
    resumed = launch(stopped, tiny_videos, splits, "--backend", backend, overrides=RECIPE)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{inside[0]} (epoch 2, iteration {iteration}" in resumed.stdout
    assert_equal_weights(final_weights(whole), final_weights(stopped))
    history = [json.loads(line) for line in (stopped / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [h["loss"] for h in history] == [r["loss"] for r in reference]
