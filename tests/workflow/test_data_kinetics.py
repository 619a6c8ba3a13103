"""The workflow's data stage through real Snakemake on a tiny Kinetics tree: source kinetics, with and without
the re-encode, up to the scan's manifest; and a kinetics config without its CSVs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import copy_workflow, python_env
from kinetics_helpers import CLASSES, FRAMES, TRAIN_LIST, VAL_LIST, make_kinetics_tree, write_video

pytestmark = pytest.mark.workflow


def snakemake(workdir: Path, config: dict, *args: str) -> subprocess.CompletedProcess:
    (workdir / "data.yaml").write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--configfile", "data.yaml"]
    return subprocess.run(cmd, cwd=workdir, env=python_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = copy_workflow(tmp_path_factory.mktemp("dataflow"))
    return work


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> dict[str, str]:
    return {k: str(v) for k, v in make_kinetics_tree(tmp_path_factory.mktemp("kinetics")).items()}


def kinetics_config(tree: dict[str, str], data_dir: str, **data) -> dict:
    return {
        "run": "k",
        "data": {"source": "kinetics", "dir": data_dir, "kinetics": tree, **data},
        "overrides": {"model": {"num_classes": len(CLASSES)}},
    }


def paths(entries: list[str], numbers: int = 1) -> list[str]:
    """The paths of list lines ending in that many numbers."""
    return [line.rsplit(" ", numbers)[0] for line in entries]


def test_kinetics_source_up_to_the_manifest(workdir, tree):
    done = snakemake(workdir, kinetics_config(tree, "results/data/k"), "results/data/k/index/manifest.json")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "rule data_kinetics:" in out and "rule data_reencode:" not in out

    index = workdir / "results/data/k/index"
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["classes"] == CLASSES
    assert {s: (v["videos"], v["failed"]) for s, v in manifest["splits"].items()} == {"train": (4, 1), "val": (3, 0)}
    assert manifest["splits"]["train"]["per_class"] == {"0": 2, "1": 1, "2": 1}
    assert [(f["path"], f["error"]) for f in manifest["failures"]] == [(paths(TRAIN_LIST)[4], "file not found")]
    train = (index / "train.lst").read_text(encoding="utf-8").splitlines()
    assert train == [f"{line.rsplit(' ', 1)[0]} {FRAMES} {line[-1]}" for line in TRAIN_LIST[:4]]
    assert all((Path(tree["root"]) / p).is_file() for p in paths(train, 2))  # relative to data.kinetics.root
    log = (workdir / "logs/data/kinetics_results_data_k.log").read_text(encoding="utf-8")
    assert f"train: 1 unlabelled (test) rows of {tree['train_csv']} left out" in log


def test_reencoded_kinetics_up_to_the_manifest_and_a_rerun_skips_the_done_videos(workdir, tree):
    reencode = {"enabled": True, "short_side": 32, "fps": 10, "gop": 4, "workers": 2}
    config = kinetics_config(tree, "results/data/kr", reencode=reencode)
    done = snakemake(workdir, config, "results/data/kr/index/manifest.json")
    assert done.returncode == 0, done.stdout + done.stderr

    data = workdir / "results/data/kr"
    manifest = json.loads((data / "index/manifest.json").read_text())
    frames = FRAMES * 10 // 25  # 0.8 s at 10 fps
    train = manifest["splits"]["train"]
    assert (train["videos"], train["failed"], train["frames_min"], train["frames_max"]) == (4, 1, frames, frames)
    assert train["sizes"] == ["42x32"] and manifest["splits"]["val"]["sizes"] == ["42x32"]  # 64x48 -> short side 32
    assert [f["path"] for f in manifest["failures"]] == [paths(TRAIN_LIST)[4]]
    lines = (data / "index/val.lst").read_text(encoding="utf-8").splitlines()
    assert lines == [f"{line.rsplit(' ', 1)[0]} {frames} {line[-1]}" for line in VAL_LIST]
    assert all((data / "reencoded" / p).is_file() for p in paths(lines, 2))  # the scan's root is the re-encoded tree
    log = workdir / "logs/data/reencode_results_data_kr.log"
    assert "4 re-encoded, 0 skipped" in log.read_text(encoding="utf-8")

    # the re-encoded tree is no declared output: a forced rerun finds every video done (reencode.jsonl)
    stamps = sorted((p, p.stat().st_mtime_ns) for p in (data / "reencoded").rglob("*.mp4"))
    again = snakemake(workdir, config, "results/data/kr/index/manifest.json", "--forcerun", "data_reencode")
    assert again.returncode == 0, again.stdout + again.stderr
    text = log.read_text(encoding="utf-8")
    assert "0 re-encoded, 4 skipped" in text and "0 re-encoded, 3 skipped" in text
    assert sorted((p, p.stat().st_mtime_ns) for p in (data / "reencoded").rglob("*.mp4")) == stamps


def test_kinetics_source_without_its_csvs_is_refused_by_name(workdir, tree):
    config = kinetics_config({"root": tree["root"]}, "results/data/none")
    done = snakemake(workdir, config, "-n", "results/data/none/index/manifest.json")
    assert done.returncode != 0
    assert (
        "clipflow: data.source is 'kinetics' but data.kinetics.train_csv, data.kinetics.val_csv are not set"
        in done.stdout + done.stderr
    )


def test_bad_reencode_settings_are_refused_by_name(workdir, tree):
    config = kinetics_config(tree, "results/data/bad", reencode={"enabled": True, "size": "340x255"})
    done = snakemake(workdir, config, "-n", "results/data/bad/index/manifest.json")
    assert done.returncode != 0
    assert "'340x255' does not match" in done.stdout + done.stderr


def test_list_source_reencoded_to_a_fixed_size_up_to_the_manifest(workdir, tree, tmp_path):
    """A GluonCV list (path num_frames label) and a `path label` one, re-encoded to GluonCV's fixed-size form."""
    gluoncv = [f"{x.rsplit(' ', 1)[0]} {FRAMES} {x[-1]}" for x in TRAIN_LIST[:4]]
    (tmp_path / "train.txt").write_text("".join(f"{x}\n" for x in gluoncv), encoding="utf-8")
    (tmp_path / "val.txt").write_text("".join(f"{x}\n" for x in VAL_LIST), encoding="utf-8")
    data = {"source": "list", "dir": "results/data/l", "root": tree["root"]}
    data.update(train_list=str(tmp_path / "train.txt"), val_list=str(tmp_path / "val.txt"))
    config = {"run": "l", "data": {**data, "reencode": {"enabled": True, "size": "34x26", "fps": 25, "gop": 8}}}
    done = snakemake(workdir, config, "results/data/l/index/manifest.json")
    assert done.returncode == 0, done.stdout + done.stderr

    manifest = json.loads((workdir / "results/data/l/index/manifest.json").read_text())
    assert manifest["classes"] is None  # a list source has no class index
    assert {s: (v["videos"], v["failed"], v["sizes"]) for s, v in manifest["splits"].items()} == {
        "train": (4, 0, ["34x26"]),
        "val": (3, 0, ["34x26"]),
    }
    train = (workdir / "results/data/l/index/train.lst").read_text(encoding="utf-8").splitlines()
    assert train == gluoncv  # the same frame count: 25 fps in and out


def planned(done: subprocess.CompletedProcess) -> set[str]:
    """The rules a dry run lists."""
    return set(re.findall(r"^rule (\w+):", done.stdout, re.MULTILINE))


def test_a_video_replaced_added_or_removed_reruns_the_scan_and_what_follows(workdir, tmp_path):
    """After the data stage and the splits ran, the dry run plans nothing; each change to the video folder makes it
    plan the scan and the splits (not the lists, which did not change), and the real run rescans."""
    tree = {k: str(v) for k, v in make_kinetics_tree(tmp_path / "kinetics").items()}
    root = Path(tree["root"])
    config = kinetics_config(tree, "results/data/changes")
    config["run"] = "changes"
    config["overrides"]["train"] = {"batch_size": 1}  # 4 training videos over 2 workers
    index = workdir / "results/data/changes/index"

    def frames_listed() -> dict[str, int]:
        lines = (index / "train.lst").read_text(encoding="utf-8").splitlines()
        return {line.rsplit(" ", 2)[0]: int(line.rsplit(" ", 2)[1]) for line in lines}

    done = snakemake(workdir, config, "splits")
    assert done.returncode == 0, done.stdout + done.stderr
    assert planned(snakemake(workdir, config, "splits", "-n")) == set()
    first, missing = paths(TRAIN_LIST)[0], paths(TRAIN_LIST)[4]
    assert frames_listed()[first] == FRAMES and missing not in frames_listed()

    write_video(root / first, frames=FRAMES // 2)  # replaced: another cut of it
    assert planned(snakemake(workdir, config, "splits", "-n")) == {"data_scan", "splits"}
    assert snakemake(workdir, config, "splits").returncode == 0
    assert frames_listed()[first] == FRAMES // 2

    write_video(root / missing)  # added: train.csv's video that was not on disk
    assert planned(snakemake(workdir, config, "splits", "-n")) == {"data_scan", "splits"}
    assert snakemake(workdir, config, "splits").returncode == 0
    assert frames_listed()[missing] == FRAMES

    (root / first).unlink()  # removed
    assert planned(snakemake(workdir, config, "splits", "-n")) == {"data_scan", "splits"}
    assert snakemake(workdir, config, "splits").returncode == 0
    assert first not in frames_listed()
    manifest = json.loads((index / "manifest.json").read_text())
    assert [(f["path"], f["error"]) for f in manifest["failures"]] == [(first, "file not found")]
    assert planned(snakemake(workdir, config, "splits", "-n")) == set()
