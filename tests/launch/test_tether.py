"""Roles tied to their launcher (clipflow.launch.tether): a real `clipflow launch` SIGKILLed while its roles wait
for each other leaves nothing running; a tethered command gets SIGTERM when the process that started it dies,
with the environment it was given; one that cannot be executed says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from helpers import free_port, python_env

from clipflow.launch.tether import CANNOT_EXEC, tethered_argv

HEARTBEAT_TIMEOUT = 5.0  # the job's, small: the roles must be gone within it


def tagged(tag: str) -> dict[int, str]:
    """The live processes (pid -> their DMLC_ROLE) whose environment holds JOB_TAG=``tag``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()  # a zombie's reads empty
        except OSError:
            continue
        env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if item)
        if env.get(b"JOB_TAG") == tag.encode():
            found[int(entry.name)] = env.get(b"DMLC_ROLE", b"").decode()
    return found


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_roles_of_a_launcher_killed_while_they_wait_end_by_themselves(tmp_path: Path) -> None:
    """clipflow's scheduler and server wait for a worker that never registers (it sleeps), as a job waits for a
    role a bad plan never starts; the launcher is SIGKILLed, so it cannot stop them: they end by themselves."""
    tag = uuid.uuid4().hex
    argv = [sys.executable, "-m", "clipflow", "launch", "-n", "1", "-s", "1", "--launcher", "local",
            "--port", str(free_port()), "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT),
            "--log-dir", str(tmp_path / "logs"), "--env", f"JOB_TAG={tag}",
            "--", sys.executable, "-c", "import time; time.sleep(120)"]  # fmt: skip
    launcher = subprocess.Popen(argv, env=python_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: sorted(tagged(tag).values()) == ["scheduler", "server", "worker"], 60, tagged(tag))
        assert launcher.poll() is None
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not tagged(tag), HEARTBEAT_TIMEOUT, f"still running: {tagged(tag)}")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in tagged(tag):  # what a failed test left: only this test's processes
            os.kill(pid, signal.SIGKILL)


def test_a_tethered_command_gets_sigterm_when_its_starter_dies_and_keeps_its_environment(tmp_path: Path) -> None:
    """The command (a shell, not Python: it keeps the environment it is given) reports its LC_CTYPE, which the
    starter does not set, although the bare Python that execs it sets one for itself under the C locale."""
    script = (f"printf %s \"${{LC_CTYPE-unset}}\" > {tmp_path}/ctype; "
              f"trap 'echo SIGTERM > {tmp_path}/ended; kill $!; exit 0' TERM; sleep 120 & wait")  # fmt: skip
    starter = ("import subprocess, sys, time; from clipflow.launch.tether import tethered_argv; "
               "env = {'LANG': 'C', 'PATH': '/usr/bin:/bin'}; "
               "child = subprocess.Popen(tethered_argv(['sh', '-c', sys.argv[1]], env), env=env); "
               "print(child.pid, flush=True); time.sleep(120)")  # fmt: skip
    parent = subprocess.Popen([sys.executable, "-c", starter, script], env=python_env(), stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        int(parent.stdout.readline())  # type: ignore[union-attr]
        wait_for(lambda: (tmp_path / "ctype").exists(), 30, "the command did not start")
        parent.kill()
        parent.wait()
        wait_for(lambda: (tmp_path / "ended").exists(), 10, "the command got no SIGTERM")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert (tmp_path / "ended").read_text() == "SIGTERM\n"
    assert (tmp_path / "ctype").read_text() == "unset"


def test_a_tethered_command_that_cannot_be_executed_is_named() -> None:
    done = subprocess.run(tethered_argv(["/no/such/program", "x"], {}), capture_output=True, text=True, timeout=30)
    assert done.returncode == CANNOT_EXEC == 127
    assert done.stderr == "clipflow launch: cannot start /no/such/program: No such file or directory\n"
