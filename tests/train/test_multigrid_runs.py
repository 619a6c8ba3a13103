"""Multigrid training run for real (clipflow.train.multigrid, wired into the trainer): two workers on the parameter
server and on torch.distributed train the cycles' shapes and batches step for step, and a run killed inside a short
cycle and resumed ends torch.equal to the unbroken one.

The recipe: the tiny SlowFast at 16 frames (8 fast-pathway, alpha 4) and 32 pixels, 2 clips a worker, 2 recipe
epochs; a long cycle of two shapes (4 frames at 2x the batch, then the recipe's 8) and the short cycle's crops 23, 27
and 32 with 2, 1 and 1 times the stage's clips; BatchNorm groups of 2 clips. Each worker's list is its 8 videos
twice (16 samples), so the coarse stage's epochs are one whole short cycle (8, 4, 4 clips) and the fine one's two
(4, 2, 2, 4, 2, 2). The kill: worker 1 at epoch 2's step 1 (after the checkpoint of its step 0, inside the short
cycle, in the stage whose BatchNorm runs in 2 groups). Both back ends sum the same buckets in the same order, so
each resumed run is compared with one unbroken run (on torch.distributed: the fewest processes)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from launch_helpers import TINY, launch_command, scanned
from sample_log_helpers import read_lines

from clipflow.data.listfile import write_list
from clipflow.train.loader_sizing import LoaderChoice, choose

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

MULTIGRID = {"long_cycle": True, "short_cycle": True, "long_cycle_factors": [[0.5, 1.0], [1.0, 1.0]],
             "short_cycle_factors": [0.7071, 0.85], "bn_base_size": 2}  # fmt: skip
RECIPE = {
    "model": {"dropout": 0.5},  # drawn per worker and step: the same masks after the resume
    "data": {**TINY["data"], "new_length": 16},
    "train": {**TINY["train"], "epochs": 2, "save_every_iters": 1, "keep_checkpoints": 50, "multigrid": MULTIGRID},
}
BACKENDS = ("ps", "ddp")
# (epoch, clips a step) of the plan: epochs 1-2 the coarse stage (4 frames), 3 the recipe's shape
STEPS = {1: [8, 4, 4], 2: [8, 4, 4], 3: [4, 2, 2, 4, 2, 2]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_videos):
    """The unbroken run on torch.distributed, and per back end a broken run resumed (side by side): their
    folders and outputs."""
    base = tmp_path_factory.mktemp("multigrid")
    entries = scanned(tiny_videos)
    splits = base / "splits"
    for rank in range(2):
        write_list(splits / f"worker{rank}.lst", entries[rank * 8 : (rank + 1) * 8] * 2)

    def start(name: str, backend: str, env: dict, recipe: dict = RECIPE) -> tuple:
        folder = base / backend / name
        argv, environ = launch_command(folder, tiny_videos, splits, "--backend", backend, overrides=recipe,
                                       env_extra={"CLIPFLOW_SAMPLE_LOG": str(folder / "samples"), **env})  # fmt: skip
        return folder, subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    kill = {"CLIPFLOW_FAULT_KILL": "1:2:1"}
    sized = {**RECIPE, "train": {**RECIPE["train"], "loader_workers": "auto"}}  # the unbroken run sizes its loader
    started = {("ddp", "whole"): start("whole", "ddp", {}, sized)}
    started.update({(b, "broken"): start("broken", b, kill) for b in BACKENDS})
    out = {key: (folder, *finish(process)) for key, (folder, process) in started.items()}
    resumed = {b: start("broken", b, {}) for b in BACKENDS}
    out.update({(b, "resumed"): (folder, *finish(process)) for b, (folder, process) in resumed.items()})
    return out


def finish(process: subprocess.Popen) -> tuple[int, str]:
    text, _ = process.communicate(timeout=400)
    return process.returncode, text


def model(folder):
    return torch.load(folder / "model.pt", weights_only=True)["model"]


def test_every_worker_trains_the_cycles_batches_step_for_step(runs):
    folder, code, out = runs[("ddp", "whole")]
    assert code == 0, out
    per_step: dict = {}
    for _, epoch, step, slot, _, weight in read_lines(folder / "samples"):
        assert weight == 1.0  # multigrid's batches take only what fits: no padding
        per_step.setdefault((epoch, step), {}).setdefault(slot, 0)
        per_step[(epoch, step)][slot] += 1
    assert all(set(slots) == {0, 1} and slots[0] == slots[1] for slots in per_step.values())  # the same on both
    sizes: dict = {}
    for (epoch, _), slots in sorted(per_step.items()):
        sizes.setdefault(epoch, []).append(slots[0])
    assert sizes == STEPS
    history = [json.loads(line) for line in (folder / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2, 3]  # the multigrid run's 1.5 x 2 epochs
    shapes = [{k: h["multigrid"][k] for k in ("stage", "frames", "crop", "clips", "bn_splits", "lr_factor")}
              for h in history]  # fmt: skip
    assert shapes == [{"stage": 0, "frames": 4, "crop": 32, "clips": 4, "bn_splits": 2, "lr_factor": 2}] * 2 + [
        {"stage": 1, "frames": 8, "crop": 32, "clips": 2, "bn_splits": 1, "lr_factor": 1}]  # fmt: skip
    assert "linear scaling rule: lr = base_lr 0.025 x global batch 4" in out


def test_each_epochs_loader_is_sized_for_its_clips_a_step(runs):
    """The unbroken run sizes its loader (train.loader_workers auto): every epoch's is the rule's for the epoch's
    mean clips a step (5.3 in the coarse stage, 2.7 in the fine one), each worker's decoding a clip as it measured
    it at its start; a new loader where the choice changes, said in the log."""
    folder, code, out = runs[("ddp", "whole")]
    assert code == 0, out
    history = [json.loads(line) for line in (folder / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    per_clip: dict[int, set[float]] = {}
    for record in history:
        clips = sum(STEPS[record["epoch"]]) / len(STEPS[record["epoch"]])
        for worker in record["workers"]:
            chosen = LoaderChoice.from_record(worker["loader"])
            assert chosen.auto and chosen.batch == round(clips), (record["epoch"], chosen)
            assert chosen == choose(chosen.decode_s, chosen.step_s, chosen.batch, chosen.cores)  # the rule
            per_clip.setdefault(worker["rank"], set()).add(round(chosen.decode_s / clips, 6))  # float32 words
    assert all(len(each) == 1 for each in per_clip.values()), per_clip
    assert "loader from epoch 1 (5 clips a step): decode " in out and "loader from epoch 3 (3 clips a step)" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_killed_inside_a_short_cycle_resumes_to_the_unbroken_weights(runs, backend):
    whole, code, out = runs[("ddp", "whole")]
    assert code == 0, out
    broken, code, out = runs[(backend, "broken")]
    assert code != 0 and "worker 1 on localhost failed (killed by signal SIGKILL)" in out, out
    inside = torch.load(broken / "ckpt" / "epoch_0002_iter_000001.pt", weights_only=True)
    assert inside["iteration"] == 1 and [len(lane) for lane in inside["slots"]["lanes"]] == [8, 8]  # 16 - 8 taken
    _, code, out = runs[(backend, "resumed")]
    assert code == 0, out
    assert "epoch_0002_iter_000001.pt (epoch 2, iteration 1, step 4)" in out, out
    a, b = model(whole), model(broken)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    history = [json.loads(line) for line in (broken / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (whole / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    assert [h["loss"] for h in history] == [h["loss"] for h in reference]
