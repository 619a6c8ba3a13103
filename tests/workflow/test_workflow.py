"""The whole workflow, through real Snakemake, on a tiny synthetic set.

One scratch copy of the workflow runs four times: a run whose worker 1 is killed
in epoch 2, a dry run that must plan only train and what follows, the rerun that
resumes from the epoch-1 checkpoint, and a last run with nothing to do. These runs
are module fixtures, each made after the one before it, so every test finds the
runs it is about whatever order the tests run in.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from helpers import copy_workflow, free_port
from workflow_helpers import TINY, snakemake

from clipflow.made import RECORD

pytestmark = pytest.mark.workflow


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """Rule -> count from the 'Job stats' table of a dry run."""
    table = dry_run_output.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    jobs = {}
    for line in table.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = copy_workflow(tmp_path_factory.mktemp("flow"))
    config = {**TINY, "run": "tiny", "cluster": {"root_port": free_port(), "heartbeat_timeout": 10}}
    (work / "tiny.yaml").write_text(json.dumps(config))
    return work


@pytest.fixture(scope="module")
def killed_run(workdir) -> dict:
    """The first run, worker 1 killed in epoch 2: its output, how long it took, and what it left behind (the
    launcher's log, processes, checkpoints), read at once, before the rerun changes them."""
    began = time.monotonic()
    done = snakemake(workdir, "train_slowfast", env_extra={"CLIPFLOW_FAULT_KILL": "1:2:1"})
    took = time.monotonic() - began
    launcher_log = workdir / "logs/tiny/train.log"
    return {
        "done": done,
        "took": took,
        "launcher_log": launcher_log.read_text() if launcher_log.exists() else "",
        "processes": processes_mentioning(str(workdir)),
        "checkpoints": list((workdir / "results/tiny/checkpoints").rglob("epoch_*.pt")),
    }


@pytest.fixture(scope="module")
def dry_run_after_the_failure(workdir, killed_run):
    return snakemake(workdir, "-n", "train_slowfast")


@pytest.fixture(scope="module")
def rerun(workdir, dry_run_after_the_failure):
    return snakemake(workdir, "train_slowfast")


@pytest.fixture(scope="module")
def second_run(workdir, rerun):
    return snakemake(workdir, "train_slowfast")


def test_killed_worker_fails_the_rule_naming_its_rank(workdir, killed_run):
    done = killed_run["done"]
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "fault injection: killing this worker at epoch 2" in out
    assert "worker 1 on localhost failed (killed by signal SIGKILL)" in out
    stopped = re.search(r"stopped the 3 other running processes in ([\d.]+) s", out)
    assert stopped and float(stopped.group(1)) < 30, out
    launcher_log = killed_run["launcher_log"]
    assert "worker 1 on localhost failed" in launcher_log
    assert killed_run["took"] < 300
    assert killed_run["processes"] == []
    checkpoints = killed_run["checkpoints"]
    assert [p.name for p in checkpoints] == ["epoch_0001.pt"]


def test_dry_run_after_the_failure_plans_only_train_and_what_follows(dry_run_after_the_failure):
    done = dry_run_after_the_failure
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = planned_jobs(done.stdout)
    assert jobs == {"train": 1, "collect": 1, "evaluate": 1, "report": 1, "train_slowfast": 1}
    assert "Missing output files" in done.stdout


def test_rerun_resumes_from_the_epoch_1_checkpoint(workdir, rerun):
    done = rerun
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    log = (workdir / "logs/tiny/train/worker-0.log").read_text()
    assert re.search(r"resumed from checkpoint \S+epoch_0001\.pt \(epoch 1, step \d+\)", log), log
    assert "epoch 1/3" not in log and "epoch 2/3" in log and "epoch 3/3" in log
    history = [json.loads(x) for x in (workdir / "results/tiny/train/metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    metrics = json.loads((workdir / "results/tiny/metrics.json").read_text())
    assert metrics["num_videos"] == 16 and 0.0 <= metrics["top1"] <= metrics["top5"] <= 1.0
    # the test protocol (10 clips x 3 crops by default) on both workers of the ps plan, the servers left out
    assert metrics["workers"] == 2 and metrics["num_views"] == 30 and len(metrics["confusion"]) == 8
    evaluation = workdir / "logs/tiny/evaluate"  # the workers' logs, their job, clipflow's record
    assert sorted(p.name for p in evaluation.iterdir()) == [RECORD, "job.json", "worker-0.log", "worker-1.log"]
    assert json.loads((evaluation / "job.json").read_text())["out"] == str(workdir / "results/tiny/metrics.json")
    train_job = json.loads((workdir / "results/tiny/checkpoints/job.json").read_text())
    assert (train_job["backend"], train_job["plan"]["num_workers"], train_job["recipe"]["train"]["epochs"]) == (
        "ps", 2, 3,
    )  # fmt: skip
    report = (workdir / "results/tiny/report/report.html").read_text()
    assert "top-1" in report and "curves.png" in report
    assert (workdir / "results/tiny/report/curves.png").stat().st_size > 10_000
    assert "linear scaling rule: lr = base_lr 0.025 x global batch 8 (2 workers x 4) / base_batch 8 = 0.025" in log
    assert (workdir / "benchmarks/tiny/train.tsv").exists()
    collected = json.loads((workdir / "results/tiny/collected/manifest.json").read_text())
    plan = json.loads((workdir / "results/tiny/cluster/plan.json").read_text())
    logged = sorted((f["role"], f["rank"]) for f in collected["files"] if f["kind"] == "log")
    assert logged == sorted((r["role"], r["rank"]) for r in plan["roles"]) and collected["verified"] is True
    assert {"model", "checkpoint"} <= {f["kind"] for f in collected["files"]}


def test_second_run_has_nothing_to_do(second_run):
    done = second_run
    assert done.returncode == 0
    assert "Nothing to be done" in done.stdout + done.stderr


@pytest.mark.usefixtures("second_run")  # the runs above are over before the data set changes
def test_broken_video_in_the_scanned_set_is_left_out(workdir):
    """A truncated mp4 added to the labels: the scan keeps the others and lists it in the manifest."""
    data = workdir / "results/data/tiny"
    good = sorted((data / "videos/train").glob("*.mp4"))[0].read_bytes()
    (data / "videos/train/broken.mp4").write_bytes(good[: len(good) // 4])
    with open(data / "train_labels.txt", "a") as fh:
        fh.write("videos/train/broken.mp4 0\n")
    done = snakemake(workdir, "--forcerun", "data_scan", "--until", "data_scan")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((data / "index/manifest.json").read_text())
    assert manifest["splits"]["train"]["videos"] == 24
    assert [f["path"] for f in manifest["failures"]] == ["videos/train/broken.mp4"]
    assert "videos/train/broken.mp4" not in (data / "index/train.lst").read_text()


def test_the_ddp_back_end_reaches_the_launch_and_an_unknown_one_is_refused(workdir):
    """config train.backend is passed to `train launch` (its runs: tests/train/test_ddp_sync.py)."""
    ddp = ("--config", "train={backend: ddp}")
    planned = snakemake(workdir, "-n", "-p", "--forcerun", "train", "train_slowfast", *ddp)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "--backend ddp --kvstore dist_sync" in planned.stdout
    refused = snakemake(workdir, "-n", "train_slowfast", "--config", "train={backend: mpi}")
    assert refused.returncode != 0
    assert "'mpi' is not one of ['ps', 'ddp']" in refused.stdout + refused.stderr
    mixed = snakemake(workdir, "-n", "train_slowfast", "--config", "train={backend: ddp, kvstore: dist_async}")
    assert mixed.returncode != 0
    assert "train.kvstore: dist_async is for the parameter server; train.backend ddp is synchronous" in (
        mixed.stdout + mixed.stderr
    )
