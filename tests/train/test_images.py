"""The CIFAR-10 recipes' path on real processes: synthetic CIFAR-format batches, index, worker lists, training
on both back ends, evaluation."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from helpers import python_env
from launch_helpers import launch, two_splits

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

# lr 0.002 at this test's global batch of 32 (2 workers x 16): enough to learn the synthetic set in 6 epochs
SMALL = {"train": {"epochs": 6, "batch_size": 16, "base_lr": 0.002, "base_batch": 32, "eval_batch_size": 50,
                   "loader_workers": 0}}  # fmt: skip


def test_resnet18_cifar10_learns_on_ps_and_ddp_to_the_same_weights_and_evaluates(tmp_path, cifar):
    """The tutorial's recipe (Adam, whole images) at a small batch: both back ends end with equal weights, the
    loss falls, validation beats chance by far, and `clipflow evaluate` scores the model on the val list."""
    runs = {}
    for backend in ("ps", "ddp"):
        out = tmp_path / backend
        val = ("--val-list", str(cifar / "index/val.lst"))
        done = launch(out, cifar / "batches", cifar / "splits", "--backend", backend, *val,
                      recipe="resnet18_cifar10", overrides=SMALL)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "lr = base_lr 0.002 x global batch 32 (2 workers x 16) / base_batch 32 = 0.002" in done.stdout
        runs[backend] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ps = torch.load(tmp_path / "ps/model.pt", weights_only=False)["model"]
    ddp = torch.load(tmp_path / "ddp/model.pt", weights_only=False)["model"]
    for name in ps:  # exact: the same steps on this machine, each gradient a sum of two addends in either back end
        assert torch.equal(ps[name], ddp[name]), name
    history = runs["ddp"]
    assert [h["loss"] for h in history] == [h["loss"] for h in runs["ps"]]
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["val_videos"] == 50 and history[-1]["val_top1"] >= 0.5  # chance: 0.1
    scored = subprocess.run(
        [sys.executable, "-m", "clipflow", "evaluate", "--model", str(tmp_path / "ddp/model.pt"),
         "--list", str(cifar / "index/val.lst"), "--root", str(cifar / "batches"), "--out", str(tmp_path / "m.json")],
        env=python_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["num_videos"] == 50 and metrics["recipe"] == "resnet18_cifar10"
    assert metrics["top1"] >= 0.5 and metrics["top1"] <= metrics["top5"] <= 1


def test_an_image_recipe_on_a_video_list_names_the_line(tmp_path, tiny_videos):
    """Video list lines are not `file#row` image paths: the worker that reads one first says which line of which
    list."""
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, recipe="resnet18_cifar10", overrides=SMALL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(rf"{splits}/worker[01]\.lst line 1: 'videos/train/\S+\.mp4' is not a CIFAR image", done.stdout)
