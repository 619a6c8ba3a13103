"""``clipflow launch -- PROGRAM`` with a program that cannot be started: one line naming the program and why
(no such file, not on PATH, not executable, a folder), before any role starts; and a role whose program fails to
start after others did: named with its role, the others stopped."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from helpers import assert_refused, clipflow

from clipflow.errors import ClipflowError
from clipflow.hosts.plan import Role
from clipflow.launch.processes import Launcher, RoleCommand


def program_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Per case: the program given to launch, and what the message says of it."""
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    script.chmod(0o644)
    return {
        "missing path": ("/no/such/program", "no such file"),
        "missing name": ("clipflow-no-such-program", "no such program on PATH"),
        "not executable": (str(script), "not executable; make it so (chmod +x), or launch it with its interpreter"),
        "folder": (str(tmp_path), "a folder, not a program"),
    }


@pytest.mark.parametrize("case", ["missing path", "missing name", "not executable", "folder"])
def test_a_program_that_cannot_start_is_refused_before_any_role(tmp_path: Path, case: str) -> None:
    program, reason = program_cases(tmp_path)[case]
    done = clipflow("launch", "-n", "1", "--log-dir", str(tmp_path / "logs"), "--", program, "--epochs", "1")
    assert_refused(done, f"cannot launch {program}: {reason}", "no role was started")
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").glob("*.log"))


def test_a_role_that_cannot_start_stops_the_roles_started_before_it(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    cmds = [RoleCommand(Role("scheduler", 0, "localhost"), sleeper),
            RoleCommand(Role("worker", 0, "localhost"), ["/no/such/program"])]  # fmt: skip
    launcher = Launcher(cmds, tmp_path, grace_s=1, console=io.StringIO())
    with pytest.raises(ClipflowError, match="^cannot start worker 0 on localhost: /no/such/program: no such file$"):
        launcher.run()
    assert len(launcher.procs) == 1 and launcher.procs[0].poll() is not None  # the scheduler started, and stopped


def test_a_launch_past_its_time_limit_is_stopped_and_says_so(tmp_path: Path) -> None:
    """The link check's all-reduce bounds its launch: roles still running at the limit are all stopped, the ending
    a failure saying the limit (exit 124, as timeout(1))."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    cmds = [RoleCommand(Role("worker", r, "localhost"), sleeper) for r in range(2)]
    console = io.StringIO()
    launcher = Launcher(cmds, tmp_path, grace_s=1, console=console, time_limit_s=1.0)
    assert launcher.run() == 124
    assert (launcher.ending.cause, launcher.ending.failed) == ("not done within 1 s", True)
    assert "clipflow launch: not done within 1 s; stopped 2 running processes" in console.getvalue()
    assert all(p.poll() is not None for p in launcher.procs)
