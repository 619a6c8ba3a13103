"""Plain helpers shared by many test modules: the repository's root, the environment for subprocesses,
``python -m clipflow`` as a subprocess, a scratch copy of the workflow for a real Snakemake run, and the check that
a command refused bad input with one clear line."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def copy_workflow(work: Path) -> Path:
    """A copy of the workflow (Snakefile, config, rules, recipes) in ``work``, for a real Snakemake run there."""
    for name in ("Snakefile", "config.yaml", "environment.yml", "workflow", "recipes"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    (work / "profiles").symlink_to("workflow/profiles")
    return work


def benchmark_seconds(tsv: Path) -> float:
    """The wall seconds of the job a Snakemake ``benchmark:`` file (tab-separated, its ``s`` column) records."""
    with tsv.open() as fh:
        return float(next(csv.DictReader(fh, delimiter="\t"))["s"])


def clipflow(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` with :func:`python_env`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "clipflow", *args], env=python_env(), capture_output=True, text=True, timeout=timeout
    )


def clipflow_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """``clipflow ARGS`` run in this process, through the same ``main`` as ``python -m clipflow``, its output taken
    from ``capsys``: for a command refused before it starts anything, without an interpreter and torch's import of
    its own (seconds each, on the suite's two cores)."""
    from clipflow.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["clipflow", *args], code, out.out, out.err)


def python_env() -> dict[str, str]:
    """Environment for subprocesses: this interpreter's venv first on PATH, progress bars off."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["CLIPFLOW_NO_PROGRESS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def assert_refused(done: subprocess.CompletedProcess, *names: str, status: int = 2) -> str:
    """``done`` exited ``status`` (2, a refused input, unless told) with one ``clipflow: error:`` line naming every
    one of ``names``, and no traceback; that line."""
    output = done.stdout + done.stderr
    assert done.returncode == status, output
    assert "Traceback" not in output, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("clipflow: error: ")]
    assert len(errors) == 1, output
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


# The suite's ports: below the kernel's ephemeral range (32768-60999 on Linux), where no outgoing connection and no
# bind to port 0 lands, and a block of its own for each xdist worker, so that no two tests running side by side are
# handed one port, nor a test one that another test's process took for a moment.
_PORT_BASE, _PORT_BLOCK = 20000, 2000
_ports_handed = 0


def free_port() -> int:
    """A TCP port free right now on every address of this machine, in this xdist worker's own block, never the one
    this process was handed last (a caller may ask for two before binding either)."""
    from clipflow.hosts.ports import port_free

    global _ports_handed
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = _PORT_BASE + int(worker or 0) % 6 * _PORT_BLOCK
    for _ in range(_PORT_BLOCK):
        port = start + (os.getpid() + _ports_handed) % _PORT_BLOCK
        _ports_handed += 1
        if port_free(port):
            return port
    raise RuntimeError(f"no free port in {start}-{start + _PORT_BLOCK - 1}")
