"""Restarts (train.max_restarts, train.min_workers): a failed launch goes on by itself from the newest checkpoint,
each attempt recorded in <checkpoint_root>/restarts.jsonl; the report draws them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import assert_refused, python_env
from launch_helpers import TINY, launch, scanned, two_splits
from report_helpers import colour_columns, embedded_figures

from clipflow.data.listfile import VideoEntry, write_list

KILLED = {**TINY, "train": {**TINY["train"], "epochs": 2, "save_every_iters": 2, "keep_checkpoints": 10}}


def attempts(run) -> list[dict]:
    return [json.loads(line) for line in (run / "ckpt" / "restarts.jsonl").read_text().splitlines()]


def assert_same_weights(a_file, b_file) -> None:
    a = torch.load(a_file, weights_only=False)["model"]
    b = torch.load(b_file, weights_only=False)["model"]
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


FAILED_BAR, FINISHED_BAR = (222, 82, 83), (86, 179, 86)  # tab:red and tab:green at alpha 0.8 on white


def report_page(run, plan, history, restarts) -> str:
    """`clipflow report` of a trained run (with a stand-in evaluation and data manifest) given its restarts.jsonl;
    the page."""
    metrics = {"recipe": "slowfast_tiny_synthetic", "top1": 0.5, "top5": 1.0, "num_videos": 4, "reference": {}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "manifest.json").write_text(json.dumps({"splits": {"train": {"videos": 16, "failed": 0}}}))
    done = subprocess.run(
        [sys.executable, "-m", "clipflow", "report", "--metrics", str(run / "metrics.json"), "--history",
         str(history), "--manifest", str(run / "manifest.json"), "--plan", str(plan), "--restarts", str(restarts),
         "--out-dir", str(run / "report")],
        env=python_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return (run / "report" / "report.html").read_text()


def assert_timeline(page: str, failures: int) -> None:
    """The page's Restarts section: a red bar per failed attempt left of the green one that finished."""
    assert page.count("<h2>Restarts</h2>") == 1
    timeline = embedded_figures(page)["restarts.png"]
    red, green = colour_columns(timeline, FAILED_BAR), colour_columns(timeline, FINISHED_BAR)
    assert red and green and max(red) < max(green) and min(red) < min(green)
    assert page.count("failed (") >= failures


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_a_killed_worker_is_restarted_by_the_launcher_and_ends_with_the_unbroken_weights(
    tmp_path, tiny_videos, backend
):
    """4 iterations an epoch, a checkpoint every 2: worker 1 SIGKILLs itself at epoch 2 iteration 1 (the fault
    fires in the first attempt only); with max_restarts 2 the one launch goes on from epoch 2's first checkpoint
    (epoch_0001.pt... epoch 2 iteration 0 is the end of epoch 1) and exits 0, with the weights of a run never
    broken."""
    splits = two_splits(tmp_path, tiny_videos, 8)
    flags = ("--backend", backend)
    whole = launch(tmp_path / "whole", tiny_videos, splits, *flags, overrides=KILLED)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    broken = tmp_path / "broken"
    done = launch(broken, tiny_videos, splits, *flags, "--max-restarts", "2", overrides=KILLED,
                  env_extra={"CLIPFLOW_FAULT_KILL": "1:2:1"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[worker 1 localhost] fault injection: killing this worker") == 1
    cause = "worker 1 on localhost failed (killed by signal SIGKILL)"
    restart = [line for line in done.stdout.splitlines() if line.startswith("clipflow: restart 1 of 2")]
    assert len(restart) == 1 and cause in restart[0], done.stdout
    assert "hosts kept: localhost; dropped: none; 2 workers; from checkpoint " in restart[0]
    assert restart[0].endswith("epoch_0001.pt"), restart[0]  # epoch 1's end: the newest before iteration 1
    assert_same_weights(tmp_path / "whole" / "model.pt", broken / "model.pt")
    first, second = attempts(broken)
    assert (first["attempt"], first["cause"], first["workers"], first["hosts"]) == (1, cause, 2, ["localhost"])
    assert first["code"] == 137 and first["resumed_from"] is None and first["lost_s"] > 0
    assert (second["attempt"], second["code"], second["cause"], second["lost_s"]) == (2, 0, "", 0)
    assert second["resumed_from"].endswith("epoch_0001.pt") and second["launch"] == first["launch"]
    assert first["started"] < first["ended"] <= second["started"] < second["ended"]
    page = report_page(broken, broken / "plan.json", broken / "metrics.jsonl", broken / "ckpt" / "restarts.jsonl")
    assert_timeline(page, 1)
    assert f"<td>{cause}</td>" in page and "<td>finished</td>" in page


def test_max_restarts_0_ends_at_the_first_failure_as_before(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, env_extra={"CLIPFLOW_FAULT_KILL": "1:1:1"})
    assert done.returncode == 137, done.stdout + done.stderr
    assert "worker 1 on localhost failed (killed by signal SIGKILL)" in done.stdout
    assert "clipflow: restart" not in done.stdout
    (only,) = attempts(tmp_path)
    assert (only["attempt"], only["code"]) == (1, 137)


def test_a_failure_that_repeats_stops_after_max_restarts_with_each_attempt_recorded(tmp_path, tiny_videos):
    """Worker 1's list names a video that is not there: every attempt fails the same way, the launcher gives up
    after 2 restarts with the exit status of the last, naming the cause."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    write_list(splits / "worker0.lst", entries[:4])
    write_list(splits / "worker1.lst", [VideoEntry("no/such/video.mp4", 0, 64), *entries[4:7]])
    done = launch(tmp_path, tiny_videos, splits, "--max-restarts", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    records = attempts(tmp_path)
    assert [r["attempt"] for r in records] == [1, 2, 3]
    assert {r["cause"] for r in records} == {"worker 1 on localhost failed (exit code 2)"}, records
    assert [r["code"] for r in records] == [2, 2, 2]
    assert [line[:27] for line in done.stdout.splitlines() if line.startswith("clipflow: restart ")] == [
        "clipflow: restart 1 of 2 af", "clipflow: restart 2 of 2 af",
    ]  # fmt: skip
    assert "clipflow: restart: no restarts left (2 of 2 made); the last failure: worker 1 on localhost failed" in (
        done.stdout
    )


def test_fewer_min_workers_without_the_training_list_is_refused(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, "--max-restarts", "1", "--min-workers", "1")
    assert_refused(done, "train.min_workers 1", "2 workers", "--train-list")
    assert not (tmp_path / "ckpt" / "restarts.jsonl").exists()
