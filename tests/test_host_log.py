"""CLIPFLOW_HOST_LOG: a clipflow process keeps its own log, and records its checksum when it exits."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from helpers import python_env


def clipflow_logged(log, *args: str) -> subprocess.CompletedProcess:
    env = {**python_env(), "CLIPFLOW_HOST_LOG": str(log)}
    return subprocess.run([sys.executable, "-m", "clipflow", *args], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_the_process_output_and_its_checksum_are_kept_on_success_and_on_error(tmp_path):
    log = tmp_path / "logs" / "on-host" / "worker-0.log"
    done = clipflow_logged(log, "models", "list")
    assert done.returncode == 0 and "slowfast" in done.stdout
    assert log.read_text() == done.stdout
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    assert (tmp_path / "logs" / "on-host" / "worker-0.log.sha256").read_text() == f"{digest}  worker-0.log\n"

    failed = clipflow_logged(log, "models", "info")  # a user error: exit 2, its message on stderr
    assert failed.returncode == 2 and "clipflow: error: models info needs a model name" in failed.stderr
    assert log.read_text() == failed.stderr
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    assert log.with_name("worker-0.log.sha256").read_text().split()[0] == digest


def test_an_unwritable_host_log_is_named_and_the_process_still_runs(tmp_path):
    (tmp_path / "file").write_text("")
    done = clipflow_logged(tmp_path / "file" / "x.log", "models", "list")
    assert done.returncode == 0 and "slowfast" in done.stdout
    assert f"cannot keep this process's log in CLIPFLOW_HOST_LOG={tmp_path / 'file' / 'x.log'}" in done.stderr
