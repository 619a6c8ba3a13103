"""CLIPFLOW_HOST_LOG: a clipflow process keeps its own log, and records its checksum when it exits; a log on a full
disk ends with one warning and the process goes on."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from disk_helpers import fill
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


def test_a_host_log_on_a_full_disk_ends_with_a_warning_and_the_process_goes_on(small_disk):
    """Issue 30: every print of a process whose host log found the disk full was a traceback."""
    log = small_disk / "worker-0.log"
    fill(small_disk, 0)
    done = clipflow_logged(log, "models", "list")
    assert done.returncode == 0 and "slowfast" in done.stdout and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"clipflow: warning: the host log {log} ends here (No space left on device)",
        f"clipflow: warning: cannot record the checksum of {log} (cannot write {log}.sha256: no space left on its "
        "disk (it needs 79 bytes, 0 bytes are free there); free some space or write to another disk, then rerun; "
        "nothing was written under that name)",
    ]  # fmt: skip
    assert log.read_text() == ""
