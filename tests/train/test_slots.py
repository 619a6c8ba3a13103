"""Gradient accumulation and resizing a run on resume (clipflow.train.slots): 2 workers x accumulate 2 train
what 4 workers do; a run resumed inside an epoch with another worker count trains every sample of the epoch once.

Tolerance of the weight comparisons: the micro-batches, their clips (drawn from each sample's place in its part),
dropout (seeded per slot and step) and BatchNorm (per micro-batch, running statistics per slot) are the same;
only the gradient sum is grouped (g0 + g1) + (g2 + g3) instead of g0 + g1 + g2 + g3, which changes float32
rounding: measured 1.5e-8 at most on any weight after one step. The tiny model then amplifies such a difference
about 30 to 300 times a step (BatchNorm over 2 clips of 1 x 1 pixels in its last stage; with a learning rate 10
times smaller it grew alike: 7e-9, 2e-6, 2e-5, 4e-4 over 4 steps), so weights are compared one step after the
runs last had the same state, at atol 1e-7 (a wrong sample or a missed micro-batch moves them by 1e-3 or more);
that every later step trained the same micro-batches is shown by the per-sample log, slot by slot.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_refused
from launch_helpers import TINY, launch, scanned
from sample_log_helpers import read_lines, trained_per_epoch

from clipflow.data.listfile import write_list
from clipflow.data.splits import epoch_order

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)


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


def assert_close_after_a_step(a, b):
    """Weights one step after equal states, as the module's docstring argues."""
    assert a.keys() == b.keys()
    for name in a:
        if a[name].is_floating_point():
            assert torch.allclose(a[name], b[name], rtol=0, atol=1e-7), (name, float((a[name] - b[name]).abs().max()))
        else:
            assert torch.equal(a[name], b[name]), name


def micro_batches(folder):
    """(epoch, step, slot) -> the videos of that micro-batch with weight > 0, from a per-sample log."""
    batches: dict = {}
    for _, epoch, step, slot, video, weight in read_lines(folder):
        if weight > 0:
            batches.setdefault((epoch, step, slot), set()).add(video)
    return batches


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_two_workers_accumulating_two_train_the_micro_batches_of_four_workers(tmp_path, tiny_videos, backend):
    """4 workers x 1 against 2 workers x accumulate 2 (the lists: the 4 parts two by two), 2 epochs of 2 steps:
    the same micro-batch in every slot at every step, the weights after the first step equal within rounding."""
    entries = scanned(tiny_videos)
    parts = [entries[i * 4 : (i + 1) * 4] for i in range(4)]
    four = launch(tmp_path / "four", tiny_videos, lists(tmp_path / "s4", parts), "--backend", backend,
                  overrides=recipe(), plan_args=("--num-workers", "4"),
                  env_extra={"CLIPFLOW_SAMPLE_LOG": str(tmp_path / "log4")})  # fmt: skip
    assert four.returncode == 0, four.stdout + four.stderr
    two = launch(tmp_path / "two", tiny_videos, lists(tmp_path / "s2", [parts[0] + parts[1], parts[2] + parts[3]]),
                 "--backend", backend, overrides=recipe(accumulate=2), plan_args=("--num-workers", "2"),
                 env_extra={"CLIPFLOW_SAMPLE_LOG": str(tmp_path / "log2")})  # fmt: skip
    assert two.returncode == 0, two.stdout + two.stderr
    assert "global batch 8 (2 workers x 2 clips x 2)" in two.stdout, two.stdout
    batches = micro_batches(tmp_path / "log4")
    assert len(batches) == 2 * 2 * 4 and all(len(videos) == 2 for videos in batches.values())  # epochs x steps x slots
    assert micro_batches(tmp_path / "log2") == batches
    first = "epoch_0001_iter_000001.pt"
    assert_close_after_a_step(weights(tmp_path / "four" / "ckpt" / first), weights(tmp_path / "two" / "ckpt" / first))


def test_four_workers_resumed_as_two_keeping_the_global_batch_inside_an_epoch(tmp_path, tiny_videos):
    """4 workers x 4 videos, 2 steps an epoch, a checkpoint every step: worker 1 killed at epoch 2 step 1; resumed
    with 2 workers and global_batch keep (accumulate 2): the unbroken 4-worker weights, every sample once."""
    entries = scanned(tiny_videos)
    parts = [entries[i * 4 : (i + 1) * 4] for i in range(4)]
    four = lists(tmp_path / "s4", parts)
    whole = launch(tmp_path / "whole", tiny_videos, four, "--backend", "ddp", overrides=recipe(),
                   plan_args=("--num-workers", "4"))  # fmt: skip
    assert whole.returncode == 0, whole.stdout + whole.stderr
    log = tmp_path / "samples"
    env = {"CLIPFLOW_SAMPLE_LOG": str(log)}
    broken = launch(tmp_path / "broken", tiny_videos, four, "--backend", "ddp", overrides=recipe(),
                    plan_args=("--num-workers", "4"), env_extra={**env, "CLIPFLOW_FAULT_KILL": "1:2:1"})  # fmt: skip
    assert broken.returncode != 0
    two = lists(tmp_path / "s2", [parts[0] + parts[1], parts[2] + parts[3]])
    resumed = launch(tmp_path / "broken", tiny_videos, two, "--backend", "ddp", "--global-batch", "keep",
                     overrides=recipe(), plan_args=("--num-workers", "2"), env_extra=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert ("resize: 4 workers x 2 clips x 1 -> 2 workers x 2 clips x 2 (keep: global batch 8), lr 0.025 -> 0.025"
            in resumed.stdout), resumed.stdout  # fmt: skip
    # the broken run equals the whole one to its checkpoint (ddp sums alike at 4 workers); one step after it
    same = "epoch_0002_iter_000001.pt"
    whole_at, broken_at = weights(tmp_path / "whole" / "ckpt" / same), weights(tmp_path / "broken" / "ckpt" / same)
    assert all(torch.equal(whole_at[name], broken_at[name]) for name in whole_at)
    assert_close_after_a_step(weights(tmp_path / "whole" / "model.pt"), weights(tmp_path / "broken" / "model.pt"))
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
    resumed = launch(tmp_path / "broken", tiny_videos, two, "--global-batch", policy, overrides=recipe(),
                     plan_args=("--num-workers", "2"), env_extra=env)  # fmt: skip
    if policy == "keep":  # refused by the launcher before any role starts
        assert_refused(resumed, "global_batch keep", "global batch 6", "workers 1, 3 would")
        assert "worker 0" not in resumed.stdout
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
    resumed = launch(tmp_path / "broken", tiny_videos, three, overrides=recipe(), plan_args=("--num-workers", "3"),
                     env_extra=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resize: 2 workers x 2 clips x 1 -> 3 workers x 2 clips x 1 (scale: global batch 4 -> 6)" in resumed.stdout
    counts = trained_per_epoch(log)
    assert sorted(counts[1]) == sorted(e.path for e in entries) and set(counts[1].values()) == {1}
    assert sum(counts[2].values()) == 12 and set(counts[2].values()) == {1}


@pytest.mark.parametrize(("before", "after"), [((3, 2), (2, 3)), ((2, 3), (3, 2))])
def test_keep_resizes_between_two_and_three_workers_with_another_batch_per_worker(tmp_path, tiny_videos, before,
                                                                                  after):  # fmt: skip
    """global batch 6 kept across 3 workers x 2 clips and 2 workers x 3 clips (no accumulation needed), killed
    after epoch 1's first step: the 6 samples left of epoch 1 spread over the new slots, every sample of both
    epochs trained once."""
    entries = scanned(tiny_videos)[:12]
    log = tmp_path / "samples"
    env = {"CLIPFLOW_SAMPLE_LOG": str(log)}

    def split(workers):
        size = len(entries) // workers
        return lists(tmp_path / f"s{workers}", [entries[r * size : (r + 1) * size] for r in range(workers)])

    def sized(batch):
        base = recipe()
        return {**base, "train": {**base["train"], "batch_size": batch}}

    (old_workers, old_batch), (new_workers, new_batch) = before, after
    broken = launch(tmp_path / "run", tiny_videos, split(old_workers), overrides=sized(old_batch),
                    plan_args=("--num-workers", str(old_workers)),
                    env_extra={**env, "CLIPFLOW_FAULT_KILL": "1:1:1"})  # fmt: skip
    assert broken.returncode != 0
    resumed = launch(tmp_path / "run", tiny_videos, split(new_workers), "--global-batch", "keep",
                     overrides=sized(new_batch), plan_args=("--num-workers", str(new_workers)),
                     env_extra=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    line = (f"resize: {old_workers} workers x {old_batch} clips x 1 -> {new_workers} workers x {new_batch} clips x 1 "
            "(keep: global batch 6)")  # fmt: skip
    assert line in resumed.stdout, resumed.stdout
    counts = trained_per_epoch(log)
    assert sorted(counts) == [1, 2]
    for epoch in (1, 2):
        assert sorted(counts[epoch]) == sorted(e.path for e in entries) and set(counts[epoch].values()) == {1}
