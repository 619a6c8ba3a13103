"""The workflow from the data sets users bring to a report, through real Snakemake: a miniature of each of UCF101
(splits 1 and 2), HMDB51, Something-Something v2 and Kinetics-600 in its published layout (tests/dataset_helpers.py)
to metrics.json and a report naming the classes; and a recipe that fixes another number of classes than a class
tree has, refused before training. The runs go side by side (one Snakemake each, in a workflow copy of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dataset_helpers import (
    HMDB51_VIDEOS,
    KINETICS600_ROWS,
    SSV2_CLASSES,
    UCF101_CLASSES,
    make_hmdb51,
    make_kinetics600,
    make_ssv2,
    make_ucf101,
)
from folder_helpers import make_class_folders
from helpers import copy_workflow, free_port, python_env

pytestmark = pytest.mark.workflow

# small and quick: one worker on torch.distributed, one epoch, clips of the miniatures' 20 frames at their 64x48, one
# view a video
QUICK = {
    "recipe": "slowfast_small_own",
    "overrides": {
        "data": {
            "new_length": 16,
            "new_width": 64,
            "new_height": 48,
            "input_size": 48,
            "test_clips": 1,
            "test_crops": 1,
        },
        "train": {"epochs": 1, "loader_workers": 0},  # no loader sizing: the README's own-videos test keeps auto
    },
    "cluster": {"num_workers": 1},
    "train": {"backend": "ddp"},
}
# name -> (the data section with the miniature's paths, the classes it must have in label order, the data set's name)
RUNS = {
    "ucf101_1": (lambda t: {"source": "ucf101", "root": t["root"], "ucf101": {"annotations": t["annotations"]}},
                 make_ucf101, UCF101_CLASSES, "UCF101 split 1"),
    "ucf101_2": (lambda t: {"source": "ucf101", "root": t["root"],
                            "ucf101": {"annotations": t["annotations"], "split": 2}},
                 make_ucf101, UCF101_CLASSES, "UCF101 split 2"),
    "hmdb51": (lambda t: {"source": "hmdb51", "root": t["root"], "hmdb51": {"annotations": t["annotations"]}},
               make_hmdb51, sorted(HMDB51_VIDEOS), "HMDB51 split 1"),
    "ssv2": (lambda t: {"source": "ssv2", "root": t["root"], "ssv2": {"annotations": t["annotations"]}},
             make_ssv2, SSV2_CLASSES, "Something-Something v2"),
    "kinetics600": (lambda t: {"source": "kinetics", "kinetics": t}, make_kinetics600, sorted(KINETICS600_ROWS),
                    "Kinetics"),
}  # fmt: skip


def start(work: Path, config: dict, target: str = "train_slowfast") -> subprocess.Popen:
    """Snakemake on ``config`` in ``work``, on a root port of its own (the runs go side by side)."""
    config = {**config, "cluster": {**config.get("cluster", {}), "root_port": free_port()}}
    (work / "run.yaml").write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", target, "--configfile", "run.yaml"]
    return subprocess.Popen(cmd, cwd=work, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, subprocess.Popen]]:
    """Every run started at once: the published miniatures' and the refused class tree's."""
    base = tmp_path_factory.mktemp("own_data")
    started = {}
    made = {}
    for name, (data, make, _, _) in RUNS.items():
        if make not in made:
            made[make] = {k: str(v) for k, v in make(base / make.__name__).items()}
        (base / name).mkdir()
        work = copy_workflow(base / name)
        started[name] = (work, start(work, {**QUICK, "run": name, "data": data(made[make])}))
    work = base / "eight"
    work.mkdir()
    copy_workflow(work)
    make_class_folders(work / "videos", ["jump", "wave", "clap", "run"], per_class=2, frames=20)
    eight = {"run": "eight", "recipe": "slowfast_tiny_synthetic", "data": {"source": "folder", "root": "videos"}}
    started["eight"] = (work, start(work, eight))
    yield started
    for _, process in started.values():
        process.kill()


def finished(runs: dict, name: str, timeout: float = 600) -> tuple[Path, int, str]:
    work, process = runs[name]
    out, _ = process.communicate(timeout=timeout)
    return work, process.returncode, out


@pytest.mark.parametrize("name", list(RUNS))
def test_a_published_data_set_in_its_own_layout_to_a_report_naming_its_classes(runs, name):
    work, code, out = finished(runs, name)
    assert code == 0, out
    _, _, classes, dataset = RUNS[name]
    metrics = json.loads((work / f"results/{name}/metrics.json").read_text())
    assert metrics["classes"] == classes and metrics["num_videos"] >= len(classes)
    report = (work / f"results/{name}/report/report.html").read_text(encoding="utf-8")
    assert dataset in report and all(c in report for c in classes)
    assert f"{len(classes)} classes, chance (a guess) is {100 / len(classes):.1f}% top-1" in report
    source = json.loads((work / "run.yaml").read_text())["data"]["source"]
    folder = next((work / "results/data").glob(f"{source}-*"))  # the data set's own folder
    manifest = json.loads((folder / "index/manifest.json").read_text())
    assert (manifest["classes"], manifest["dataset"].startswith(dataset)) == (classes, True)
    assert (folder / "classes.txt").read_text(encoding="utf-8").splitlines() == classes


def test_the_two_ucf101_splits_validate_on_other_videos(runs):
    val = {}
    for name in ("ucf101_1", "ucf101_2"):
        work, code, out = finished(runs, name)
        assert code == 0, out
        val[name] = (next((work / "results/data").glob("ucf101-*")) / "index/val.lst").read_text().splitlines()
    assert val["ucf101_1"] and val["ucf101_2"] and not set(val["ucf101_1"]) & set(val["ucf101_2"])


def test_a_recipe_fixing_8_classes_on_a_4_class_tree_is_refused_before_training_naming_both(runs):
    work, code, out = finished(runs, "eight")
    assert code != 0
    assert "rule train:" not in out  # refused by the data stage, before any training
    log = next((work / "logs/data").glob("scan_*.log")).read_text()
    assert "the data has 4 classes" in log and "the recipe's model has num_classes 8" in log
    assert "leave num_classes out of the recipe to take the data's, or set it to 4" in log
