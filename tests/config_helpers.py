"""A dry run of the workflow (``snakemake -n``) in a copy of it, and the check that Snakemake refused a bad
config or recipe while reading the workflow: a non-zero exit, one ``clipflow:`` line naming the setting and its
value, and no Python traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import python_env


def dry_run(workdir: Path, *args: str, target: str = "train_slowfast") -> subprocess.CompletedProcess:
    """``snakemake -n --cores 1 TARGET ARGS`` in ``workdir`` (a copy of the workflow), output captured."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", target, *args]
    return subprocess.run(cmd, cwd=workdir, env=python_env(), capture_output=True, text=True, timeout=180)


def assert_workflow_refused(done: subprocess.CompletedProcess, *names: str) -> str:
    """``done`` (a Snakemake run) stopped before any job with one ``clipflow:`` line naming every one of
    ``names``, and no traceback; that line."""
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    assert "Job stats" not in output and "rule " not in output, output  # refused while reading, no job planned
    errors = [line for line in output.splitlines() if line.startswith("clipflow: ")]
    assert len(errors) == 1, output
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]
