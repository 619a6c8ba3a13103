"""The slurm launcher run for real inside a Slurm allocation (tests/slurm_cluster.py): roles as srun steps on the
allocated nodes, their output prefixed and logged per role, the first failure ending every step, scancel ending
everything on every node."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest
from helpers import free_port, python_env
from launch_helpers import TINY
from netns_hosts import wait_until
from slurm_helpers import refusal_in, role_pid, sbatch, three_splits, train_script, training_started

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]


def test_the_tiny_recipe_trains_across_three_nodes_as_srun_steps(slurm, tmp_path, tiny_videos):
    script = train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos))
    job = sbatch(slurm, script)
    info = slurm.wait_job(job, 300)
    out = (tmp_path / "job.out").read_text()
    assert info["JobState"] == "COMPLETED", out
    assert (tmp_path / "model.pt").exists() and (tmp_path / "metrics.jsonl").exists()
    assert "[worker 0 n1] epoch 1/1 loss" in out, out  # each role's lines prefixed with its role, rank and node
    roles = ["scheduler-0", *(f"{role}-{rank}" for role in ("server", "worker") for rank in range(3))]
    assert sorted(p.stem for p in (tmp_path / "logs").glob("*.log")) == sorted(roles)
    assert "final model" in (tmp_path / "logs" / "worker-0.log").read_text()
    slurm.wait_quiet()


LONG = {**TINY, "train": {**TINY["train"], "epochs": 20}}


def running_job(slurm, tmp_path, tiny_videos) -> str:
    """A 20-epoch job on 3 nodes, once its workers train."""
    job = sbatch(slurm, train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos), overrides=LONG))
    if not wait_until(lambda: training_started(tmp_path / "job.out"), 240, 0.5):
        raise AssertionError(f"no training step in 240 s: {(tmp_path / 'job.out').read_text()}\n{slurm.logs()}")
    return job


def test_a_role_killed_on_one_node_ends_the_job_naming_node_role_and_rank(slurm, tmp_path, tiny_videos):
    job = running_job(slurm, tmp_path, tiny_videos)
    pid = role_pid(slurm, 1, "server", 1)
    assert pid is not None, slurm.node_processes()
    os.kill(pid, signal.SIGKILL)
    info = slurm.wait_job(job, 60)  # the heartbeat timeout is 10 s
    out = (tmp_path / "job.out").read_text()
    assert info["JobState"] == "FAILED", out
    assert "server 1 on n2" in out, out
    assert "SIGKILL" in out or "exit code 137" in out, out
    slurm.wait_quiet()


def test_scancel_of_a_running_job_leaves_nothing_on_any_node(slurm, tmp_path, tiny_videos):
    job = running_job(slurm, tmp_path, tiny_videos)
    before = slurm.node_processes()
    assert all(before.get(node) for node in slurm.nodes), before  # roles run on every node
    for index in range(3):  # the roles' values reached them through the environment, never srun's command line
        pid = role_pid(slurm, index, "server", index)
        assert pid is not None, before
        assert b"DMLC_ROLE=server" in Path(f"/proc/{pid}/environ").read_bytes()
    sruns = [line for lines in before.values() for line in lines if " srun " in f" {line.split(' ', 1)[1]}"]
    assert sruns and not [line for line in sruns if "DMLC_" in line or "CLIPFLOW_PS" in line], sruns
    slurm.run(["scancel", job])
    assert slurm.wait_job(job, 60)["JobState"] == "CANCELLED"
    slurm.wait_quiet()


def test_a_plan_naming_more_nodes_than_the_allocation_has_is_refused(slurm, tmp_path, tiny_videos):
    script = train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos), plan_args=("--hosts", "n1,n2,n3"))
    job = sbatch(slurm, script, "--nodes=2")
    assert slurm.wait_job(job, 120)["ExitCode"] == "2:0"
    refusal_in((tmp_path / "job.out").read_text(), "3 nodes planned (n1, n2, n3)", "has 2 (n1, n2)", "n3 is not in it",
               "sbatch --nodes=3")  # fmt: skip
    assert not (tmp_path / "plan.json").exists()
    slurm.wait_quiet()


def test_a_three_node_plan_launched_in_a_two_node_allocation_is_refused_before_any_role_starts(
    slurm, tmp_path, tiny_videos
):
    planning = ["cluster", "plan", "--launcher", "slurm", "--hosts", "n1,n2,n3", "--num-workers", "3"]
    made = slurm.run([sys.executable, "-m", "clipflow", *planning, "--out", str(tmp_path / "plan.json")],
                     env=python_env())  # fmt: skip
    assert made.returncode == 0, made.stderr  # outside an allocation, node names are taken as they are
    script = train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos), make_plan=False)
    job = sbatch(slurm, script, "--nodes=2")
    assert slurm.wait_job(job, 120)["ExitCode"] == "2:0"
    refusal_in((tmp_path / "job.out").read_text(), "n3 is not in it", "Slurm job")
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("*.log"))
    slurm.wait_quiet()


def test_an_mxnet_job_runs_on_three_slurm_nodes_under_clipflow_launch(slurm, tmp_path, mx_python):
    """MXNet's own ps-lite roles as srun steps: its traffic is not encrypted, so the nodes' addresses need
    CLIPFLOW_PS_INSECURE=1, as for clipflow's own roles without security."""
    job_py = Path(__file__).parent / "mxnet_kvstore_job.py"
    launch = [sys.executable, "-m", "clipflow", "launch", "-n", "3", "-s", "2", "--launcher", "slurm", "--mxnet",
              "--port", str(free_port()), "--log-dir", str(tmp_path / "logs"), "--", str(mx_python),
              str(job_py)]  # fmt: skip
    script = tmp_path / "mxnet.sbatch"
    script.write_text(f"#!/bin/sh\nCLIPFLOW_PS_INSECURE=1 exec {' '.join(map(shlex.quote, launch))}\n")
    info = slurm.wait_job(sbatch(slurm, script), 240)
    out = (tmp_path / "job.out").read_text()
    assert info["JobState"] == "COMPLETED", out
    pulled = re.findall(r"^\[worker (\d) (n\d)\] mxnet worker \d of 3 round 0 pulled \[6.0\] expected 6$", out, re.M)
    assert sorted(pulled) == [("0", "n1"), ("1", "n2"), ("2", "n3")], out
    slurm.wait_quiet()
