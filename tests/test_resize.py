"""Gradient accumulation and resizing a run on resume (clipflow.train.slots): 2 workers x accumulate 2 train
what 4 workers do; a run resumed inside an epoch with another worker count trains every sample of the epoch once.

Tolerance of the weight comparisons: the micro-batches, their clips (drawn from each sample's place in its part),
dropout (seeded per slot and step) and BatchNorm (per micro-batch, running statistics per slot) are the same;
only the gradient sum is grouped (g0 + g1) + (g2 + g3) instead of g0 + g1 + g2 + g3, which changes float32
rounding by about one unit in the last place per step (relative 6e-8), grown over 4 SGD steps of a tiny model:
rtol 1e-4 and atol 1e-6 are orders above that and far below any real difference (a wrong sample or a missed
micro-batch moves weights by 1e-3 or more).
"""

from __future__ import annotations

import shutil

import pytest
import torch
from launch_helpers import TINY, launch, scanned
from sample_log_helpers import trained_per_epoch

from clipflow.data.listfile import write_list
from clipflow.data.splits import epoch_order


def lists(folder, groups):
    """worker{r}.lst of each group of entries; the folder."""
    for rank, group in enumerate(groups):
        write_list(folder / f"worker{rank}.lst", group)
    return folder


def recipe(accumulate=1, epochs=2):
    return {**TINY, "model": {"dropout": 0.5},
            "train": {**TINY["train"], "epochs": epochs, "save_every_iters": 1, "keep_checkpoints": 20,
                      "accumulate": accumulate}}  # fmt: skip


def weights(path):
    return torch.load(path, weights_only=False)["model"]


def assert_close(a, b):
    assert a.keys() == b.keys()
    for name in a:
        if a[name].is_floating_point():
            assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-6), name
        else:
            assert torch.equal(a[name], b[name]), name


def adopt(old_run, new_run, tiny_videos, splits, overrides, *flags, workers):
    """Until checkpoints belong to the run (issue 19 point 1), a run with another worker count keeps them in a
    folder of its own: start it once to make that folder (killed before its first step), copy the old run's
    checkpoints and history there."""
    made = launch(new_run, tiny_videos, splits, *flags, overrides=overrides, plan_args=("--num-workers", str(workers)),
                  env_extra={"CLIPFLOW_FAULT_KILL": "0:1:0"})  # fmt: skip
    assert made.returncode != 0
    old = next(p for p in (old_run / "ckpt").iterdir() if p.is_dir())
    new = next(p for p in (new_run / "ckpt").iterdir() if p.is_dir())
    for path in old.iterdir():
        if path.name.startswith("epoch_") or path.name == "metrics.jsonl":
            shutil.copy2(path, new / path.name)


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_two_workers_accumulating_two_end_with_the_weights_of_four_workers(tmp_path, tiny_videos, backend):
    entries = scanned(tiny_videos)
    parts = [entries[i * 4 : (i + 1) * 4] for i in range(4)]
    four = launch(tmp_path / "four", tiny_videos, lists(tmp_path / "s4", parts), "--backend", backend,
                  overrides=recipe(), plan_args=("--num-workers", "4"))  # fmt: skip
    assert four.returncode == 0, four.stdout + four.stderr
    two = launch(tmp_path / "two", tiny_videos, lists(tmp_path / "s2", [parts[0] + parts[1], parts[2] + parts[3]]),
                 "--backend", backend, overrides=recipe(accumulate=2), plan_args=("--num-workers", "2"))  # fmt: skip
    assert two.returncode == 0, two.stdout + two.stderr
    assert "2 workers x 2 micro-batches" in two.stdout and "global batch 8 (2 workers x 2 clips x 2)" in two.stdout
    assert_close(weights(tmp_path / "four" / "model.pt"), weights(tmp_path / "two" / "model.pt"))


def test_four_workers_resumed_as_two_keeping_the_global_batch_inside_an_epoch(tmp_path, tiny_videos):
    """4 workers x 4 videos, 2 steps an epoch, a checkpoint every step: worker 1 killed at epoch 2 step 1; resumed
    with 2 workers and global_batch keep (accumulate 2): the unbroken 4-worker weights, every sample once."""
    entries = scanned(tiny_videos)
    parts = [entries[i * 4 : (i + 1) * 4] for i in range(4)]
    four = lists(tmp_path / "s4", parts)
    whole = launch(tmp_path / "whole", tiny_videos, four, overrides=recipe(), plan_args=("--num-workers", "4"))
    assert whole.returncode == 0, whole.stdout + whole.stderr
    log = tmp_path / "samples"
    env = {"CLIPFLOW_SAMPLE_LOG": str(log)}
    broken = launch(tmp_path / "broken", tiny_videos, four, overrides=recipe(), plan_args=("--num-workers", "4"),
                    env_extra={**env, "CLIPFLOW_FAULT_KILL": "1:2:1"})  # fmt: skip
    assert broken.returncode != 0
    two = lists(tmp_path / "s2", [parts[0] + parts[1], parts[2] + parts[3]])
    adopt(tmp_path / "broken", tmp_path / "resized", tiny_videos, two, recipe(), "--global-batch", "keep", workers=2)
    resumed = launch(tmp_path / "resized", tiny_videos, two, "--global-batch", "keep", overrides=recipe(),
                     plan_args=("--num-workers", "2"), env_extra=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert ("resize: 4 workers x 2 clips x 1 -> 2 workers x 2 clips x 2 (keep: global batch 8), lr 0.025 -> 0.025"
            in resumed.stdout), resumed.stdout  # fmt: skip
    assert_close(weights(tmp_path / "whole" / "model.pt"), weights(tmp_path / "resized" / "model.pt"))
    counts = trained_per_epoch(log)
    assert sorted(counts) == [1, 2]
    for epoch in (1, 2):
        assert sorted(counts[epoch]) == sorted(e.path for e in entries) and set(counts[epoch].values()) == {1}


@pytest.mark.parametrize("policy", ["scale", "keep"])
def test_three_workers_resumed_as_two_inside_an_epoch(tmp_path, tiny_videos, policy):
    """3 workers x 4 videos (2 steps an epoch, global batch 6), killed after epoch 1's first step; resumed with 2
    workers: keep has no whole accumulate (6 / (2 x 2)) and is refused naming 1 and 3 workers; scale goes on,
    the 8 samples left of epoch 1 spread over the 2 workers, every sample of every epoch trained once."""
    entries = scanned(tiny_videos)[:12]
    three = lists(tmp_path / "s3", [entries[0:4], entries[4:8], entries[8:12]])
    log = tmp_path / "samples"
    env = {"CLIPFLOW_SAMPLE_LOG": str(log)}
    broken = launch(tmp_path / "broken", tiny_videos, three, overrides=recipe(), plan_args=("--num-workers", "3"),
                    env_extra={**env, "CLIPFLOW_FAULT_KILL": "2:1:1"})  # fmt: skip
    assert broken.returncode != 0
    two = lists(tmp_path / "s2", [entries[0:6], entries[6:12]])
    adopt(tmp_path / "broken", tmp_path / "resized", tiny_videos, two, recipe(), "--global-batch", policy, workers=2)
    resumed = launch(tmp_path / "resized", tiny_videos, two, "--global-batch", policy, overrides=recipe(),
                     plan_args=("--num-workers", "2"), env_extra=env)  # fmt: skip
    if policy == "keep":
        assert resumed.returncode != 0
        assert "global_batch keep" in resumed.stdout and "workers 1, 3 would" in resumed.stdout, resumed.stdout
        return
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resize: 3 workers x 2 clips x 1 -> 2 workers x 2 clips x 1 (scale: global batch 6 -> 4)" in resumed.stdout
    counts = trained_per_epoch(log)
    assert sorted(counts[1]) == sorted(e.path for e in entries) and set(counts[1].values()) == {1}
    order = epoch_order(6, 0, 2)[:6]  # epoch 2 in the new lists: each worker's part, 3 steps of 2
    assert sorted(counts[2]) == sorted(part[i].path for part in (entries[0:6], entries[6:12]) for i in order)
    assert set(counts[2].values()) == {1}


def test_two_workers_resumed_as_three_inside_an_epoch_by_scale(tmp_path, tiny_videos):
    """2 workers x 6 videos (3 steps an epoch), killed after epoch 1's first step; resumed with 3 workers (scale):
    the 8 samples left spread 3, 3, 2 (the last slot pads its second micro-batch), none repeated or skipped."""
    entries = scanned(tiny_videos)[:12]
    log = tmp_path / "samples"
    env = {"CLIPFLOW_SAMPLE_LOG": str(log)}
    two = lists(tmp_path / "s2", [entries[0:6], entries[6:12]])
    broken = launch(tmp_path / "broken", tiny_videos, two, overrides=recipe(), plan_args=("--num-workers", "2"),
                    env_extra={**env, "CLIPFLOW_FAULT_KILL": "1:1:1"})  # fmt: skip
    assert broken.returncode != 0
    three = lists(tmp_path / "s3", [entries[0:4], entries[4:8], entries[8:12]])
    adopt(tmp_path / "broken", tmp_path / "resized", tiny_videos, three, recipe(), workers=3)
    resumed = launch(tmp_path / "resized", tiny_videos, three, overrides=recipe(), plan_args=("--num-workers", "3"),
                     env_extra=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resize: 2 workers x 2 clips x 1 -> 3 workers x 2 clips x 1 (scale: global batch 4 -> 6)" in resumed.stdout
    counts = trained_per_epoch(log)
    assert sorted(counts[1]) == sorted(e.path for e in entries) and set(counts[1].values()) == {1}
    assert sum(counts[2].values()) == 12 and set(counts[2].values()) == {1}
