"""The remote supervisor with real processes, fed on a stdin pipe as ssh carries it: pass-through of output,
environment, cwd and exit codes; stopping the whole process group on end of file or a signal; bad requests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import python_env

from clipflow.errors import ClipflowError
from clipflow.launch.remote_exec import MAX_LINE_BYTES, NOTICE_LINE, parse_request, request_line

SUPERVISOR = [sys.executable, "-m", "clipflow.launch.remote_exec"]
SECRET = "s3cr3t-token-Zq9\nsecond line 'quoted' $HOME"
PREFIX = "clipflow remote_exec: "

# Writes "child_pid grandchild_pid" to argv[1] once ready, then sleeps; with "ignore-term" it ignores SIGTERM
# (the grandchild inherits that).
SLEEPER = """
import os, signal, subprocess, sys, time
if "ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
os.rename(tmp, sys.argv[1])
time.sleep(600)
"""


@pytest.fixture
def supervisors() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Supervisors a test started; killed at teardown if a failing test left them running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for sup in started:
        if sup.poll() is None:
            sup.kill()
        try:
            sup.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a leftover holds its stdout; the test has failed already
            pass


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    """Where SLEEPER writes its pids; whatever it names is SIGKILLed at teardown."""
    path = tmp_path / "pids"
    yield path
    if path.exists():
        for pid in read_pids(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start(supervisors: list[subprocess.Popen[bytes]], **env_extra: str) -> subprocess.Popen[bytes]:
    env = {**python_env(), "CLIPFLOW_REMOTE_GRACE_S": "2", **env_extra}
    sup = subprocess.Popen(SUPERVISOR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    supervisors.append(sup)
    return sup


def send(sup: subprocess.Popen[bytes], line: bytes) -> None:
    """Write the request and keep stdin open, as the launcher does."""
    assert sup.stdin is not None
    sup.stdin.write(line)
    sup.stdin.flush()


def close_stdin(sup: subprocess.Popen[bytes]) -> None:
    """What the launcher going away looks like from the remote side: end of file on stdin."""
    assert sup.stdin is not None
    sup.stdin.close()
    sup.stdin = None  # communicate() must not flush it again


def finish(sup: subprocess.Popen[bytes], timeout: float = 10) -> tuple[int, str, str]:
    """Wait for the supervisor to exit on its own (stdin still open), then collect its output."""
    sup.wait(timeout=timeout)
    out, err = sup.communicate(timeout=5)
    return sup.returncode, out.decode(), err.decode()


def run_raw(supervisors: list[subprocess.Popen[bytes]], data: bytes, **env_extra: str) -> tuple[int, str, str]:
    """Feed ``data`` and close stdin (bad requests)."""
    sup = start(supervisors, **env_extra)
    out, err = sup.communicate(data, timeout=10)
    return sup.returncode, out.decode(), err.decode()


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


def wait_for_pids(path: Path, sup: subprocess.Popen[bytes], timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert sup.poll() is None, f"the supervisor exited early: {sup.returncode}"
        assert time.monotonic() < deadline, "the child never wrote its pids"
        time.sleep(0.02)
    return read_pids(path)


def alive(pid: int) -> bool:
    """Running (a zombie, left for a parent or init to reap, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def all_gone(pids: list[int], timeout: float = 3) -> bool:
    """SIGKILL is delivered asynchronously: give the kernel a moment."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX + "error: "), err
    return lines[0]


# ---------------------------------------------------------------- pass-through


def test_env_cwd_and_output_pass_through(supervisors, tmp_path):
    code = (
        "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}));"
        "print(os.getcwd()); sys.exit(3)"
    )
    argv = py(code, "SECRET", "OVERRIDDEN", "INHERITED", "PYTHONUNBUFFERED")
    sup = start(supervisors, OVERRIDDEN="from the remote shell", INHERITED="kept")
    send(sup, request_line(argv, {"SECRET": SECRET, "OVERRIDDEN": "from the launcher"}, str(tmp_path)))
    rc, out, err = finish(sup)
    first, cwd = out.splitlines()
    assert json.loads(first) == {
        "SECRET": SECRET,
        "OVERRIDDEN": "from the launcher",
        "INHERITED": "kept",
        "PYTHONUNBUFFERED": "1",
    }
    assert cwd == str(tmp_path)
    assert rc == 3, err
    assert err == ""


def test_child_killed_by_signal_maps_to_128_plus_signal(supervisors):
    sup = start(supervisors)
    send(sup, request_line(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), {}, None))
    rc, _, err = finish(sup)
    assert rc == 128 + signal.SIGKILL, err


def test_leftovers_in_the_group_are_killed_when_the_child_exits(supervisors, pid_file):
    code = (
        "import subprocess, sys; g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); open(sys.argv[1], 'w').write(str(g.pid))"
    )
    sup = start(supervisors)
    send(sup, request_line(py(code, str(pid_file)), {}, None))
    rc, _, err = finish(sup)
    assert rc == 0, err
    assert all_gone(read_pids(pid_file))


def test_secret_never_on_a_command_line(supervisors, pid_file):
    sup = start(supervisors)
    send(sup, request_line(py(SLEEPER, str(pid_file)), {"SECRET": SECRET}, None))
    child, grandchild = wait_for_pids(pid_file, sup)
    for pid in (sup.pid, child, grandchild):
        assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"s3cr3t" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"SECRET=" + SECRET.encode() in Path(f"/proc/{child}/environ").read_bytes()
    close_stdin(sup)
    finish(sup)


# ---------------------------------------------------------------- stopping


def test_closing_stdin_stops_child_and_grandchild(supervisors, pid_file):
    sup = start(supervisors)
    send(sup, request_line(py(SLEEPER, str(pid_file)), {}, None))
    child, grandchild = wait_for_pids(pid_file, sup)
    began = time.monotonic()
    close_stdin(sup)
    rc, _, err = finish(sup, timeout=8)
    assert time.monotonic() - began < 1.5, "SIGTERM should have ended the sleeper at once"
    assert rc == 128 + signal.SIGTERM, err
    assert f"the launcher went away; stopping {sys.executable} (pid {child})" in err
    assert all_gone([child, grandchild])


def test_child_ignoring_sigterm_is_killed_after_the_grace_period(supervisors, pid_file):
    sup = start(supervisors)
    send(sup, request_line(py(SLEEPER, str(pid_file), "ignore-term"), {}, None))
    child, grandchild = wait_for_pids(pid_file, sup)
    began = time.monotonic()
    close_stdin(sup)
    rc, _, err = finish(sup, timeout=10)
    took = time.monotonic() - began
    assert 1.8 <= took < 6, f"grace 2 s, took {took:.1f} s"
    assert rc == 128 + signal.SIGTERM, err
    assert "sending SIGKILL" in err
    assert all_gone([child, grandchild])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_to_the_supervisor_stops_the_group(supervisors, pid_file, signum):
    sup = start(supervisors)
    send(sup, request_line(py(SLEEPER, str(pid_file)), {}, None))
    child, grandchild = wait_for_pids(pid_file, sup)
    sup.send_signal(signum)
    rc, _, err = finish(sup, timeout=8)
    assert rc == 128 + signum, err
    assert f"received {signal.Signals(signum).name}; stopping" in err
    assert all_gone([child, grandchild])


# ---------------------------------------------------------------- a notice

# Sleeps argv[2] seconds before it takes SIGUSR1 (a worker still starting), then writes "notice" to argv[1] when one
# comes (SIGUSR1 unblocked: one held pending since the start arrives now) and exits 79.
NOTICED = """
import signal, sys, time
time.sleep(float(sys.argv[2]))
def on_notice(signum, frame):
    open(sys.argv[1], "w").write("notice")
    sys.exit(79)
signal.signal(signal.SIGUSR1, on_notice)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
time.sleep(600)
"""


def test_a_notice_line_is_passed_on_as_sigusr1_and_the_supervisor_goes_on(supervisors, tmp_path):
    """A notice line after the request reaches the running command as SIGUSR1; the supervisor keeps supervising
    and exits with the command's status; a line that is no notice is named and ignored."""
    mark = tmp_path / "mark"
    sup = start(supervisors)
    send(sup, request_line(py(NOTICED, str(mark), "0"), {}, None))
    time.sleep(1.5)  # the child has its handler by now (it does not hold the notice)
    send(sup, b"hello\n")
    send(sup, NOTICE_LINE)
    rc, _, err = finish(sup)
    assert rc == 79, err
    assert mark.read_text() == "notice"
    assert "a notice: passing SIGUSR1 on to" in err
    assert "ignored a line on stdin that is no notice: b'hello'" in err


def test_a_notice_sent_with_the_request_waits_for_a_command_that_holds_it(supervisors, tmp_path):
    """hold_notice: the command starts with SIGUSR1 blocked, so a notice written together with the request (the
    command still starting, 1 s without a handler) is not its death but waits for its handler."""
    mark = tmp_path / "mark"
    sup = start(supervisors)
    send(sup, request_line(py(NOTICED, str(mark), "1"), {}, None, hold_notice=True) + NOTICE_LINE)
    rc, _, err = finish(sup)
    assert rc == 79, err
    assert mark.read_text() == "notice"


def test_without_hold_notice_an_early_notice_ends_the_command_by_its_signal(supervisors, tmp_path):
    """The other side of the test above: unheld, the same early notice kills the command (SIGUSR1's default)."""
    mark = tmp_path / "mark"
    sup = start(supervisors)
    send(sup, request_line(py(NOTICED, str(mark), "1"), {}, None) + NOTICE_LINE)
    rc, _, err = finish(sup)
    assert rc == 128 + signal.SIGUSR1, err
    assert not mark.exists()


# ---------------------------------------------------------------- bad requests


def line(payload: object) -> bytes:
    return json.dumps(payload).encode() + b"\n"


OK_ARGV = [sys.executable, "-c", "pass"]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"not json\n", "not JSON"),
        (b"\xff\xfe{}\n", "not UTF-8"),
        (line([1, 2]), "must be a JSON object, got an array"),
        (line({"env": {}, "cwd": None}), "lacks the fields ['argv']"),
        (line({"argv": [], "env": {}, "cwd": None}), "'argv' must be a non-empty list"),
        (line({"argv": "python", "env": {}, "cwd": None}), "'argv' must be a non-empty list of strings, got a string"),
        (line({"argv": ["python", 1], "env": {}, "cwd": None}), "item 1 is a number"),
        (line({"argv": OK_ARGV, "env": {"K": 1}, "cwd": None}), "'env' value of K must be a string, got a number"),
        (line({"argv": OK_ARGV, "env": ["K"], "cwd": None}), "'env' must be an object of strings"),
        (line({"argv": OK_ARGV, "env": {"A=B": "x"}, "cwd": None}), "invalid variable name 'A=B'"),
        (line({"argv": OK_ARGV, "env": {}, "cwd": 5}), "'cwd' must be a non-empty path string or null"),
        (line({"argv": OK_ARGV, "env": {}, "cwd": None, "shell": True}), "unknown fields ['shell']"),
        (line({"argv": OK_ARGV, "env": {}, "cwd": None, "hold_notice": 1}), "'hold_notice' must be true or false"),
        (b'{"argv": ["a"], "argv": ["b"], "env": {}, "cwd": null}\n', "duplicate keys ['argv']"),
        (b"", "stdin closed before a request line arrived"),
        (b'{"argv": ["a"]', "stdin closed in the middle of the request line"),
        (b'{"argv": ["' + b"a" * MAX_LINE_BYTES + b'"], "env": {}, "cwd": null}\n', "longer than the limit"),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else None,
)
def test_bad_request_exits_2(supervisors, data, needle):
    rc, out, err = run_raw(supervisors, data)
    assert rc == 2, err
    assert needle in error_line(err)
    assert out == ""


def test_error_messages_never_show_env_values(supervisors):
    rc, _, err = run_raw(supervisors, line({"argv": OK_ARGV, "env": {"A": SECRET, "B": 7}, "cwd": None}))
    assert rc == 2
    assert "'env' value of B" in error_line(err)
    assert "s3cr3t" not in err


def test_missing_cwd_exits_2_naming_it(supervisors, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    rc, _, err = run_raw(supervisors, request_line(OK_ARGV, {}, str(missing)))
    assert rc == 2
    assert f"working directory {str(missing)!r} does not exist" in error_line(err)


def test_missing_executable_exits_127_naming_it(supervisors):
    rc, _, err = run_raw(supervisors, request_line(["clipflow-no-such-program", "--x"], {}, None))
    assert rc == 127
    assert "command not found: 'clipflow-no-such-program'" in error_line(err)


def test_non_executable_file_exits_126(supervisors, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    rc, _, err = run_raw(supervisors, request_line([str(script)], {}, None))
    assert rc == 126
    assert f"permission denied executing {str(script)!r}" in error_line(err)


def test_bad_grace_setting_exits_2(supervisors):
    rc, _, err = run_raw(supervisors, request_line(OK_ARGV, {}, None), CLIPFLOW_REMOTE_GRACE_S="soon")
    assert rc == 2
    assert "CLIPFLOW_REMOTE_GRACE_S='soon'" in error_line(err)


# ---------------------------------------------------------------- request_line


def test_request_line_is_one_line_and_round_trips():
    encoded = request_line(("prog", "a b", "ü"), {"K": SECRET}, None)
    assert encoded.endswith(b"\n") and encoded.count(b"\n") == 1
    request = parse_request(encoded[:-1])
    assert request.argv == ("prog", "a b", "ü")
    assert request.env == {"K": SECRET}
    assert request.cwd is None
    assert request.hold_notice is False and b"hold_notice" not in encoded  # as before, for a plain command
    assert parse_request(request_line(["prog"], {}, None, hold_notice=True)[:-1]).hold_notice is True


@pytest.mark.parametrize(
    ("argv", "env", "cwd"),
    [([], {}, None), ("prog", {}, None), (["prog"], {"K": 1}, None), (["prog"], {}, ""), (["a\0b"], {}, None)],
)
def test_request_line_rejects_bad_input(argv, env, cwd):
    with pytest.raises(ClipflowError):
        request_line(argv, env, cwd)


def test_request_line_refuses_oversized_requests():
    with pytest.raises(ClipflowError, match="the limit is"):
        request_line(["prog"], {"BIG": "x" * MAX_LINE_BYTES}, None)
