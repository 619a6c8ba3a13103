"""The whole workflow through real Snakemake on the tiny synthetic set (tests/workflow/, cluster/test_cluster_hosts):
its config (TINY, written to tiny.yaml in a copy of the workflow) and a Snakemake run there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers import python_env

TINY = {
    "data": {
        "dir": "results/data/tiny",
        "synthetic": {"num_train": 24, "num_val": 16, "min_frames": 24, "max_frames": 40, "short_side": 64},
    },
    "overrides": {
        "train": {"epochs": 3, "batch_size": 4, "save_frequency": 1, "warmup_epochs": 0, "loader_workers": 0},
        "data": {"new_length": 16, "new_width": 42, "new_height": 32, "input_size": 32},
    },
}


def workflow_for_hosts(repo: Path, work: Path) -> Path:
    """A copy of the workflow in ``work`` for the sshd hosts' tests, and the Python the roles on the hosts run
    (this checkout's clipflow, whatever the venv holds); returns that Python."""
    for name in ("Snakefile", "config.yaml", "environment.yml", "workflow", "recipes"):
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    (work / "profiles").symlink_to("workflow/profiles")
    python = work / "python-under-test"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={repo / "src"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def three_host_cluster(python: Path, key: str, known_hosts: str, **settings) -> dict:
    """The cluster settings of the three-host workflow tests: the ssh launcher, a worker and a server on each host,
    a free port, a short heartbeat timeout, and ``settings`` besides."""
    from helpers import free_port

    return {"python": str(python), "launcher": "ssh", "num_workers": 3, "num_servers": 3, "root_port": free_port(),
            "heartbeat_timeout": 10, "ssh_key": key, "known_hosts": known_hosts, **settings}  # fmt: skip


def snakemake(workdir: Path, *args: str, env_extra: dict | None = None, timeout: int = 600):
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--configfile", "tiny.yaml"]
    env = {**python_env(), **(env_extra or {})}
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
