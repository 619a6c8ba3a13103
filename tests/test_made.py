"""Commands that write files of their own naming into a folder the user names (issue 17, point 1): someone's own
file of one of those names, or a file clipflow wrote there and the user edited since, is refused before any work
with one line naming it, and nothing in the folder changes; a rerun into the command's own earlier output goes on.
The record of what clipflow wrote is :data:`clipflow.made.RECORD`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import assert_refused, clipflow, clipflow_here, free_port
from kinetics_helpers import make_kinetics_tree
from safety_helpers import listing

from clipflow.made import RECORD, Made

SYNTH = ["--num-train", "8", "--num-val", "8", "--min-frames", "8", "--max-frames", "10", "--short-side", "32"]
NOT_OURS = "is not a file clipflow wrote there"
CHANGED = "was changed since clipflow wrote it"


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    """A tiny synthetic video set (its lists: train_labels.txt, val_labels.txt) for the scan to read."""
    out = tmp_path_factory.mktemp("synth") / "set"
    done = clipflow("data", "synth", "--out-dir", str(out), *SYNTH)
    assert done.returncode == 0, done.stderr
    return out


def check_the_three_cases(tmp_path: Path, run: Callable[[Path], object], name: str, flag: str = "--out-dir") -> None:
    """``run(out)`` (a clipflow process writing ``name`` among others into ``out``): accepted into a new folder
    and again into its own output; refused, nothing changed, once the user edited ``name``; refused, nothing
    changed, into a folder holding the user's own file ``name``."""
    out = tmp_path / "out"
    for _ in range(2):  # a new folder, then a rerun into its own earlier output
        done = run(out)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (out / name).is_file() and (out / RECORD).is_file()
    with (out / name).open("ab") as fh:
        fh.write(b"# my own note\n")
    before = listing(tmp_path)
    assert_refused(run(out), f"{flag} {out}: {out / name} {CHANGED}", "move it away or name another folder")
    assert listing(tmp_path) == before

    theirs = tmp_path / "theirs"
    (theirs / name).parent.mkdir(parents=True)
    (theirs / name).write_text("someone's own file\n")
    before = listing(tmp_path)
    assert_refused(run(theirs), f"{flag} {theirs}: {theirs / name} {NOT_OURS}", "nothing was changed")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("name", ["train.lst", "val.lst", "manifest.json", "videos.json", "train.scan.jsonl"])
def test_scan_refuses_index_files_it_did_not_write(videos, tmp_path, name):
    def scan(out: Path):
        return clipflow("data", "scan", "--train-list", str(videos / "train_labels.txt"), "--val-list",
                        str(videos / "val_labels.txt"), "--root", str(videos), "--num-classes", "8", "--out-dir",
                        str(out))  # fmt: skip

    if name.endswith(".jsonl"):  # a journal is appended to: recorded by name, its lines are its own to check
        out = tmp_path / "theirs"
        out.mkdir()
        (out / name).write_text("my own notes\n")
        before = listing(tmp_path)
        assert_refused(scan(out), f"--out-dir {out}: {out / name} {NOT_OURS}")
        assert listing(tmp_path) == before
        return
    check_the_three_cases(tmp_path, scan, name)


@pytest.mark.parametrize("name", ["train_labels.txt", "classes.txt", "videos/val/val_00003_left_fast.mp4"])
def test_synth_refuses_lists_and_videos_it_did_not_write(tmp_path, name):
    check_the_three_cases(tmp_path, lambda out: clipflow("data", "synth", "--out-dir", str(out), *SYNTH), name)


def test_cifar_synth_and_index_refuse_files_they_did_not_write(tmp_path):
    def synth(out: Path):
        return clipflow("data", "cifar-synth", "--out-dir", str(out), "--num-train", "20", "--num-val", "10")

    check_the_three_cases(tmp_path / "synth", synth, "data_batch_2")
    batches = tmp_path / "batches"
    assert synth(batches).returncode == 0
    index = tmp_path / "index"
    index.mkdir()
    check_the_three_cases(index, lambda out: clipflow("data", "cifar-index", "--root", str(batches), "--out-dir",
                                                      str(out)), "classes.txt")  # fmt: skip


def test_kinetics_refuses_lists_it_did_not_write(tmp_path):
    tree = make_kinetics_tree(tmp_path / "tree")
    (tmp_path / "made").mkdir()

    def kinetics(out: Path):
        return clipflow("data", "kinetics", "--train-csv", str(tree["train_csv"]), "--val-csv", str(tree["val_csv"]),
                        "--root", str(tree["root"]), "--out-dir", str(out))  # fmt: skip

    check_the_three_cases(tmp_path / "made", kinetics, "val_labels.txt")


def test_splits_refuses_worker_lists_it_did_not_write(videos, tmp_path):
    index = tmp_path / "index"
    done = clipflow("data", "scan", "--train-list", str(videos / "train_labels.txt"), "--val-list",
                    str(videos / "val_labels.txt"), "--root", str(videos), "--num-classes", "8", "--out-dir",
                    str(index))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "made").mkdir()

    def splits(out: Path):
        return clipflow("splits", "--list", str(index / "train.lst"), "--num-workers", "2", "--seed", "0",
                        "--out-dir", str(out))  # fmt: skip

    check_the_three_cases(tmp_path / "made", splits, "worker1.lst")


def test_train_and_evaluate_launch_refuse_a_job_file_they_did_not_write(tmp_path, capsys):
    """The job file is written before any worker starts; a launch that gets past its check is stopped here by
    a later one (a --model-out folder, a missing model), so no training runs."""
    plan = tmp_path / "plan.json"
    made = clipflow("cluster", "plan", "--num-workers", "1", "--root-port", str(free_port()), "--out", str(plan))
    assert made.returncode == 0, made.stderr
    (tmp_path / "folder").mkdir()

    def train(ckpt: Path, model_out: str = "model.pt"):
        return clipflow_here(capsys, "train", "launch", "--plan", str(plan), "--recipe", "slowfast_tiny_synthetic",
                             "--splits-dir", str(tmp_path / "splits"), "--root", str(tmp_path), "--log-dir",
                             str(tmp_path / "logs"), "--checkpoint-root", str(ckpt), "--model-out",
                             str(tmp_path / model_out), "--metrics-out", str(tmp_path / "m.jsonl"))  # fmt: skip

    def evaluate(logs: Path):
        return clipflow_here(capsys, "evaluate", "launch", "--plan", str(plan), "--log-dir", str(logs), "--model",
                             str(tmp_path / "none.pt"), "--list", str(tmp_path / "none.lst"), "--root", str(tmp_path),
                             "--out", str(tmp_path / "metrics.json"))  # fmt: skip

    for flag, run in (("--checkpoint-root", train), ("--log-dir", evaluate)):
        theirs, own = tmp_path / f"theirs{flag}", tmp_path / f"own{flag}"
        theirs.mkdir()
        (theirs / "job.json").write_text('{"my": "own job"}\n')
        Made(own, flag).write_text("job.json", "{}\n")  # a job file clipflow wrote there earlier
        before = listing(tmp_path)
        assert_refused(run(theirs), f"{flag} {theirs}: {theirs / 'job.json'} {NOT_OURS}", "nothing was changed")
        assert listing(tmp_path) == before
        (own / "job.json").write_text('{"edited": true}\n')
        before = listing(tmp_path)
        assert_refused(run(own), f"{flag} {own}: {own / 'job.json'} {CHANGED}")
        assert listing(tmp_path) == before
        Made(own, flag).write_text("job.json", "{}\n")
        passed = train(own, "folder") if run is train else evaluate(own)  # past the job file's check
        assert passed.returncode == 2 and "job.json" not in passed.stderr, passed.stderr


def test_a_record_that_is_not_clipflows_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD).write_text("not json\n")
    (out / "classes.txt").write_text("mine\n")
    before = listing(tmp_path)
    done = clipflow("data", "synth", "--out-dir", str(out), *SYNTH)
    assert_refused(done, f"--out-dir {out}: {out / RECORD} is not a record clipflow wrote", "name another folder")
    assert listing(tmp_path) == before


def test_launch_refuses_a_log_of_a_roles_name_it_did_not_write(tmp_path):
    """The launcher writes each role's log anew every run (``<role>-<rank>.log``): a user's own file of such a
    name in --log-dir is refused before any role starts; its own logs from an earlier run are written again."""
    logs = tmp_path / "logs"

    def launch(folder: Path):
        return clipflow("launch", "-n", "1", "--log-dir", str(folder), "--", sys.executable, "-c", "pass")

    for _ in range(2):
        done = launch(logs)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (logs / "worker-0.log").is_file()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "worker-0.log").write_text("my own notes\n")
    before = listing(tmp_path)
    assert_refused(launch(theirs), f"--log-dir {theirs}: {theirs / 'worker-0.log'} {NOT_OURS}", "nothing was changed")
    assert listing(tmp_path) == before
