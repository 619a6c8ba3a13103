"""The training job (clipflow.train.job): made and checked once, written as job.json, and the only thing a worker
starts from besides its rank; a bad job file is named before any process starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import clipflow_here, python_env
from job_helpers import tiny_job, tiny_job_dict, write_job_file
from launch_helpers import launch, two_splits

from clipflow.errors import ClipflowError
from clipflow.hosts.plan import Plan
from clipflow.launch.start import job_command, worker_commands
from clipflow.train.job import TrainJob


def clipflow_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clipflow", *args], env=python_env(), capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_a_job_is_written_beside_the_checkpoints_and_reads_back_equal(tmp_path):
    job = tiny_job(tmp_path)
    path = job.write()
    assert path == tmp_path / "ckpt" / "job.json"
    assert json.loads(path.read_text()) == job.to_dict()
    again = TrainJob.read(path)
    assert again == job and again.recipe["train"]["epochs"] == job.recipe["train"]["epochs"]
    assert again.paths.shard(1) == tmp_path / "splits" / "worker1.lst" and again.paths.val_list is None


@pytest.mark.parametrize("backend, roles", [("ps", ["scheduler", "server", "worker", "worker", "worker"]),
                                            ("ddp", ["worker", "worker", "worker"])])  # fmt: skip
def test_a_workers_command_line_is_the_job_file_and_its_rank(tmp_path, backend, roles):
    job = tiny_job(tmp_path, backend, workers=3)
    path = job.write()
    commands = worker_commands(job.plan, job_command("train", path), backend, str(tmp_path / "logs"), True)
    assert [c.role.role for c in commands] == roles
    workers = [c for c in commands if c.role.role == "worker"]
    assert [c.argv for c in workers] == [
        [sys.executable, "-m", "clipflow", "train", "worker", "--job", str(path), "--rank", str(rank)]
        for rank in range(3)
    ]


def drop(section: str | None, key: str):
    def change(job: dict) -> None:
        del (job[section] if section else job)[key]

    return change


def put(value, *keys):
    def change(job: dict) -> None:
        place = job
        for key in keys[:-1]:
            place = place[key]
        place[keys[-1]] = value

    return change


BAD_JOBS = {
    "missing key": (drop(None, "seed"), "(top level): 'seed' is a required property"),
    "missing path": (drop("paths", "root"), "paths: 'root' is a required property"),
    "wrong type": (put("zero", "seed"), "seed: 'zero' is not of type 'integer'"),
    "unknown back end": (put("horovod", "backend"), "backend: 'horovod' is not one of ['ps', 'ddp']"),
    "unknown kvstore mode": (put("dist_fast", "ps", "mode"), "ps.mode: 'dist_fast' is not one of"),
    "relative path": (put("data/videos", "paths", "root"), "paths.root: 'data/videos' does not match '^(/|~/)'"),
    "unknown key": (put(3, "epochs"), "Additional properties are not allowed ('epochs' was unexpected)"),
    "other version": (put(2, "version"), "version: 1 was expected"),
    "bad plan": (put("boss", "plan", "roles", 0, "role"), "plan.roles.0.role: 'boss' is not one of"),
    "bad recipe": (put(0, "recipe", "train", "epochs"), "recipe: train.epochs: 0 is less than the minimum of 1"),
    "a worker short": (put(3, "plan", "num_workers"), "plan.num_workers is 3 but plan.roles has 2 workers"),
    "ps setting with ddp": (
        lambda job: (put("ddp", "backend")(job), put("dist_async", "ps", "mode")(job)),
        "kvstore dist_async is a parameter-server mode; the ddp back end is synchronous",
    ),
}


@pytest.mark.parametrize("case", BAD_JOBS, ids=list(BAD_JOBS))
def test_a_bad_job_file_is_named_by_the_launcher_before_any_process_starts(tmp_path, case, capsys):
    change, message = BAD_JOBS[case]
    job = tiny_job_dict(tmp_path)
    change(job)
    path = write_job_file(tmp_path / "job.json", job)
    logs = tmp_path / "logs"
    done = clipflow_here(capsys, "train", "launch", "--job", str(path), "--log-dir", str(logs))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"clipflow: error: job file {path}" in done.stderr and message in done.stderr, done.stderr
    assert "`clipflow train launch` writes a good one" in done.stderr
    assert not logs.exists()  # no role was started: the launcher makes the log folder for the first one


def move_scheduler_last(job: dict) -> None:
    roles = job["plan"]["roles"]
    roles.append(roles.pop(0))


# hand edits of a job's plan that its schema takes: roles (scheduler, server 0, worker 0, worker 1) against the counts
HAND_EDITS = {
    "a worker short": (
        put(3, "plan", "num_workers"),
        "plan.num_workers is 3 but plan.roles has 2 workers (no worker 2); give plan.roles one worker for each rank "
        "0..2, or make plan.num_workers 2",
    ),
    "a worker more": (
        put(1, "plan", "num_workers"),
        "plan.num_workers is 1 but plan.roles has 2 workers (a worker 1, outside 0..0); give plan.roles one worker "
        "for each rank 0..0, or make plan.num_workers 2",
    ),
    "a worker twice": (
        put(0, "plan", "roles", 3, "rank"),
        "plan.roles has worker 0 twice (plan.num_workers 2); give plan.roles one worker for each rank 0..1",
    ),
    "a worker beyond": (
        put(5, "plan", "roles", 3, "rank"),
        "plan.roles has a worker 5, outside 0..1 (plan.num_workers 2); give plan.roles one worker for each rank 0..1",
    ),
    "a server short": (
        put(2, "plan", "num_servers"),
        "plan.num_servers is 2 but plan.roles has 1 server (no server 1); give plan.roles one server for each rank "
        "0..1, or make plan.num_servers 1",
    ),
    "no scheduler": (
        lambda job: job["plan"]["roles"].pop(0),
        "plan.roles has no scheduler; give it one, as its first role (plan.roles[0])",
    ),
    "two schedulers": (
        lambda job: job["plan"]["roles"].append(dict(job["plan"]["roles"][0])),
        "plan.roles has 2 schedulers (plan.roles[0] and [4]); give it one, as its first role (plan.roles[0])",
    ),
    "scheduler not first": (
        move_scheduler_last,
        "plan.roles[3] is the scheduler, but the scheduler must be the first role (plan.roles[0], now a server); "
        "move it there",
    ),
    "scheduler rank": (put(1, "plan", "roles", 0, "rank"), "plan.roles[0], the scheduler, has rank 1; give it rank 0"),
    "scheduler elsewhere": (
        put("127.0.0.2", "plan", "root_uri"),
        "plan.roles[0], the scheduler, is at address 127.0.0.1 but plan.root_uri is 127.0.0.2, where every other role "
        "looks for it; make them the same address",
    ),
    "a role on no host of the plan": (
        put("node9", "plan", "roles", 3, "host"),
        "plan.roles[3] (worker 1) is on node9, which is not one of plan.hosts (localhost); put it on one of them, "
        "or add its host to plan.hosts",
    ),
    "a remote host with the local launcher": (
        put(["localhost", "node9"], "plan", "hosts"),
        "plan.launcher is local, which runs every role on this machine, but plan.hosts names node9; use hosts "
        "[localhost], or launcher ssh",
    ),
}


@pytest.mark.parametrize("case", HAND_EDITS, ids=list(HAND_EDITS))
def test_a_job_file_whose_roles_disagree_with_its_plan_is_refused_naming_the_field(tmp_path, case):
    change, message = HAND_EDITS[case]
    job = tiny_job_dict(tmp_path)
    change(job)
    path = write_job_file(tmp_path / "job.json", job)
    with pytest.raises(ClipflowError) as info:
        TrainJob.read(path)
    fix = "`clipflow train launch` writes a good one (or rerun the train stage)"
    assert str(info.value) == f"job file {path}: {message}; {fix}"


def test_a_cluster_plan_whose_roles_disagree_with_its_counts_is_refused_naming_it_by_a_launch(tmp_path):
    plan = tiny_job_dict(tmp_path)["plan"]
    plan["num_workers"] = 3
    path = write_job_file(tmp_path / "plan.json", plan)
    assert Plan.read(path).num_workers == 3  # read to check its hosts, say: taken as it is
    with pytest.raises(ClipflowError) as info:
        Plan.read(path, launching=True)  # to launch a job from (train launch --plan, evaluate launch --plan)
    assert str(info.value) == (
        f"cluster plan {path}: plan.num_workers is 3 but plan.roles has 2 workers (no worker 2); give plan.roles one "
        "worker for each rank 0..2, or make plan.num_workers 2; rerun the cluster stage"
    )


def test_a_job_file_that_is_not_json_or_not_there_is_named(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1,')
    done = clipflow_run("train", "launch", "--job", str(broken), "--log-dir", str(tmp_path / "logs"))
    assert done.returncode == 2 and f"job file {broken} cannot be read (Expecting" in done.stderr, done.stderr
    listed = write_job_file(tmp_path / "list.json", [])  # type: ignore[arg-type]
    done = clipflow_run("train", "worker", "--job", str(listed), "--rank", "0")
    assert done.returncode == 2 and "(top level): [] is not of type 'object'" in done.stderr, done.stderr
    done = clipflow_run("train", "worker", "--job", str(tmp_path / "gone.json"), "--rank", "0")
    assert done.returncode == 2 and f"job file {tmp_path / 'gone.json'} does not exist" in done.stderr, done.stderr


def test_a_worker_names_a_bad_job_file_and_a_rank_outside_the_plan(tmp_path):
    job = tiny_job_dict(tmp_path)
    job["backend"] = "horovod"
    bad = write_job_file(tmp_path / "bad" / "job.json", job)
    done = clipflow_run("train", "worker", "--job", str(bad), "--rank", "0")
    assert done.returncode == 2 and "backend: 'horovod' is not one of" in done.stderr, done.stderr
    good = tiny_job(tmp_path).write()
    done = clipflow_run("train", "worker", "--job", str(good), "--rank", "2")
    assert done.returncode == 2, done.stderr
    assert "worker rank 2 is not in the job's plan: its ranks are 0..1" in done.stderr


def test_a_job_file_and_the_flags_that_make_one_are_not_mixed(tmp_path, capsys):
    path = tiny_job(tmp_path).write()
    done = clipflow_here(
        capsys, "train", "launch", "--job", str(path), "--log-dir", str(tmp_path / "logs"), "--recipe", "x"
    )
    assert done.returncode == 2 and "--job names the whole job: drop --recipe, or drop --job" in done.stderr
    done = clipflow_here(
        capsys,
        "train",
        "launch",
        "--job",
        str(path),
        "--log-dir",
        str(tmp_path / "logs"),
        "--backend",
        "ps",
        "--seed",
        "0",
        "--update-on-kvstore",
    )  # the job's own settings, or not: never ignored
    assert done.returncode == 2, done.stderr
    assert "drop --backend, --update-on-kvstore, --seed, or drop --job" in done.stderr
    done = clipflow_here(
        capsys, "train", "launch", "--log-dir", str(tmp_path / "logs"), "--recipe", "slowfast_tiny_synthetic"
    )
    assert done.returncode == 2, done.stderr
    assert "clipflow train launch needs --plan, --splits-dir, --root, --checkpoint-root, --model-out" in done.stderr


def test_the_job_made_from_flags_is_checked_once_before_anything_starts(tmp_path):
    with pytest.raises(ClipflowError, match=r"job: seed: 'zero' is not of type 'integer'"):
        TrainJob.from_dict({**tiny_job_dict(tmp_path), "seed": "zero"})


def test_a_run_relaunched_from_its_job_file_resumes_from_its_checkpoint(tmp_path, tiny_videos):
    """`train launch` wrote job.json beside the checkpoints; `train launch --job` with that file alone starts the
    same run again: it resumes from the last checkpoint (nothing left to train) and writes the model again. The
    user edited the file (here: only its layout): the launch takes it as it is, neither refusing it as changed
    nor rewriting it."""
    splits = two_splits(tmp_path, tiny_videos)
    first = launch(tmp_path, tiny_videos, splits)
    assert first.returncode == 0, first.stdout + first.stderr
    job = tmp_path / "ckpt" / "job.json"
    written = json.loads(job.read_text())
    assert written["paths"]["splits_dir"] == str(splits) and written["recipe"]["train"]["epochs"] == 1
    (tmp_path / "model.pt").unlink()
    edited = json.dumps(written, indent=4) + "\n"
    job.write_text(edited)
    again = subprocess.run(
        [sys.executable, "-m", "clipflow", "train", "launch", "--job", str(job), "--log-dir", str(tmp_path / "again")],
        env={**python_env(), "CLIPFLOW_HEARTBEAT_TIMEOUT": "10"}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from checkpoint" in again.stdout and "(epoch 1, step 2)" in again.stdout
    assert (tmp_path / "model.pt").exists() and job.read_text() == edited
