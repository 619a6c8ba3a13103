"""An image recipe through real Snakemake: generated CIFAR-10 batches, their index, worker lists, training on the
ddp back end, evaluation and the report; and the sources an image recipe refuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import copy_workflow, free_port, python_env

pytestmark = pytest.mark.workflow

CONFIG = {
    "run": "cifar",
    "recipe": "resnet18_cifar10",
    "data": {
        "source": "synthetic_cifar10",
        "dir": "results/data/cifar",
        "synthetic": {"num_train": 200, "num_val": 50},
    },
    "overrides": {
        "train": {
            "epochs": 2,
            "batch_size": 16,
            "base_lr": 0.002,
            "base_batch": 32,
            "eval_batch_size": 50,
            "loader_workers": 0,
        }
    },  # fmt: skip
    "train": {"backend": "ddp"},
}


def snakemake(workdir, *args: str):
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--configfile", "cifar.yaml"]
    return subprocess.run(cmd, cwd=workdir, env=python_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("cifar"))
    (work / "cifar.yaml").write_text(json.dumps({**CONFIG, "cluster": {"root_port": free_port()}}))
    return work


def test_resnet18_cifar10_end_to_end_on_ddp(workdir):
    done = snakemake(workdir, "train_slowfast")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    manifest = json.loads((workdir / "results/data/cifar/index/manifest.json").read_text())
    assert manifest["kind"] == "image" and manifest["splits"]["train"]["images"] == 200
    assert (workdir / "results/data/cifar/cifar-10-batches-py/test_batch").exists()
    history = [json.loads(x) for x in (workdir / "results/cifar/train/metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["val_videos"] == 50
    metrics = json.loads((workdir / "results/cifar/metrics.json").read_text())
    assert metrics["recipe"] == "resnet18_cifar10" and metrics["num_videos"] == 50 and 0 <= metrics["top1"] <= 1
    assert metrics["reference"]["top1"] == 68.79
    assert metrics["protocol"] == "1 view (whole image)" and metrics["workers"] == 2 and metrics["num_views"] == 1
    report = (workdir / "results/cifar/report/report.html").read_text()
    assert "<th>split</th><th>images</th><th>failed</th>" in report and "<td>train</td><td>200</td><td>0</td>" in report
    assert (
        "back end ddp: gradients summed over 2 workers (gloo, rank 0 on cpu)"
        in (workdir / "logs/cifar/train.log").read_text()
    )


@pytest.mark.parametrize(
    "config, message",
    [
        ({"data": {"source": "synthetic"}},
         "recipe resnet18_cifar10 trains on images but data.source is 'synthetic'; use data.source cifar10 or "
         "synthetic_cifar10"),
        ({"data": {"source": "cifar10"}}, "data.source is 'cifar10' but data.cifar10_dir is not set"),
        ({"recipe": "slowfast_tiny_synthetic", "data": {"source": "synthetic_cifar10"}},
         "recipe slowfast_tiny_synthetic trains on videos but data.source is 'synthetic_cifar10'; use a video source"),
    ],
)  # fmt: skip
def test_a_source_that_does_not_fit_the_recipe_is_refused(tmp_path, config, message):
    work = copy_workflow(tmp_path)
    (work / "cifar.yaml").write_text(json.dumps({**CONFIG, **config}))
    done = snakemake(work, "-n", "train_slowfast")
    assert done.returncode != 0 and message in done.stdout + done.stderr, done.stdout + done.stderr
