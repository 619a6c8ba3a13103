"""The remote end of a role started over ssh: run one command, and stop it when the launcher goes away.

The launcher runs ``ssh [opts] user@host 'exec /path/python -m clipflow.launch.remote_exec'`` with the local
ssh process's stdin a pipe, and the protocol on that pipe is:

* The launcher writes ONE line: a JSON object ``{"argv": [str, ...], "env": {str: str}, "cwd": str | null}``,
  maybe with ``"hold_notice": true`` (built by :func:`request_line`; at most 1 MiB). This supervisor starts
  ``argv`` in ``cwd`` with its own environment plus ``env`` (``env`` wins, and ``PYTHONUNBUFFERED=1``), in a
  new session (its own process group), stdin from /dev/null, stdout and stderr inherited, so the command's
  output goes straight back through ssh as it is written. With ``hold_notice`` the command starts with
  SIGUSR1 blocked (a training worker unblocks it once its handler is in place, :mod:`clipflow.launch.notice`),
  so a notice that comes while it starts waits instead of killing it.
* The launcher then keeps the pipe open for the life of the role. Each further line ``notice`` (
  :data:`NOTICE_LINE`) is a notice (a spot reclaim, a Slurm time limit near): the supervisor sends SIGUSR1 to
  the command's process group and goes on supervising; the command decides what it does with it (training
  workers stop after their step, resumable). Any other line is named on stderr and ignored.
* End of file on stdin means "stop": the supervisor sends SIGTERM to the command's whole process group, SIGKILL
  after a grace period (``CLIPFLOW_REMOTE_GRACE_S``, default 10 s), and exits 143.
* SIGTERM, SIGINT or SIGHUP sent to the supervisor stop the group the same way; it exits 128 + the signal.
* Otherwise it exits with the command's exit status (128 + S for a command killed by signal S), after
  killing whatever the command left running in its process group.
* A bad request exits 2, a command that cannot be found 127, one that cannot be executed 126, each with
  one line on stderr starting ``clipflow remote_exec: error:``.

Why: without a pty, ssh does not forward signals, so killing the local ssh or the launcher, or losing the
connection, would otherwise leave the role running on the host, holding ports and GPUs. The one thing
that reliably reaches the remote side in all of those cases is end of file on stdin. And environment
values (which may hold secrets) travel inside the stream, never on a command line, where ``ps`` and
``/proc/<pid>/cmdline`` on either host would show them.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clipflow.environment import read_env
from clipflow.errors import ClipflowError

MAX_LINE_BYTES = 1 << 20
KILL_WAIT_S = 5.0
EVENT_POLL_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PREFIX = "clipflow remote_exec"
FIELDS = ("argv", "env", "cwd")
OPTIONAL = ("hold_notice",)
NOTICE_LINE = b"notice\n"  # after the request: pass SIGUSR1 on to the command's group
NOTICE_SIGNAL = signal.SIGUSR1


class RemoteExecError(ClipflowError):
    """A request or start failure; the supervisor prints it as one line and exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Request:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str | None
    hold_notice: bool = False


# ---------------------------------------------------------------- the request line (both ends)


def request_line(argv: Sequence[str], env: Mapping[str, str], cwd: str | None, hold_notice: bool = False) -> bytes:
    """The JSON line the launcher writes to the supervisor's stdin, ending in ``b"\\n"``."""
    request = validated_request({"argv": list(argv) if not isinstance(argv, str) else argv, "env": env, "cwd": cwd,
                                 **({"hold_notice": True} if hold_notice else {})})  # fmt: skip
    payload = {"argv": list(request.argv), "env": request.env, "cwd": request.cwd,
               **({"hold_notice": True} if request.hold_notice else {})}  # fmt: skip
    line = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    if len(line) > MAX_LINE_BYTES:
        raise RemoteExecError(
            f"the request for {request.argv[0]!r} is {len(line)} bytes; the limit is {MAX_LINE_BYTES}"
        )
    return line + b"\n"


def parse_request(line: bytes) -> Request:
    """The request in one line of stdin (without its newline), validated strictly."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RemoteExecError(f"the request line is not UTF-8 (bad byte at offset {e.start})") from None
    try:
        payload = json.loads(text, object_pairs_hook=reject_duplicate_keys)
    except json.JSONDecodeError as e:
        raise RemoteExecError(f"the request line is not JSON: {e.msg} at char {e.pos}") from None
    return validated_request(payload)


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise RemoteExecError(f"the request has duplicate keys {duplicates}")
    return dict(pairs)


def validated_request(payload: Any) -> Request:
    if not isinstance(payload, dict):
        raise RemoteExecError(f"the request must be a JSON object, got {json_type(payload)}")
    unknown = sorted(set(payload) - set(FIELDS) - set(OPTIONAL))
    missing = [field for field in FIELDS if field not in payload]
    if unknown:
        raise RemoteExecError(f"the request has unknown fields {unknown}; expected {list(FIELDS)}")
    if missing:
        raise RemoteExecError(f"the request lacks the fields {missing}; expected {list(FIELDS)}")
    hold = payload.get("hold_notice", False)
    if not isinstance(hold, bool):
        raise RemoteExecError(f"'hold_notice' must be true or false, got {json_type(hold)}")
    return Request(validated_argv(payload["argv"]), validated_env(payload["env"]), validated_cwd(payload["cwd"]), hold)


def validated_argv(argv: Any) -> tuple[str, ...]:
    if not isinstance(argv, list) or not argv:
        raise RemoteExecError(f"'argv' must be a non-empty list of strings, got {json_type(argv)}")
    for index, item in enumerate(argv):
        if not isinstance(item, str):
            raise RemoteExecError(f"'argv' must hold only strings; item {index} is {json_type(item)}")
        if "\0" in item:
            raise RemoteExecError(f"'argv' item {index} holds a NUL character")
    if not argv[0]:
        raise RemoteExecError("'argv' item 0 (the program) is empty")
    return tuple(argv)


def validated_env(env: Any) -> dict[str, str]:
    """Names are checked and named in messages; values are only type-checked and never shown (secrets)."""
    if not isinstance(env, Mapping):
        raise RemoteExecError(f"'env' must be an object of strings, got {json_type(env)}")
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise RemoteExecError(f"'env' has an invalid variable name {name!r}")
        if not isinstance(value, str):
            raise RemoteExecError(f"'env' value of {name} must be a string, got {json_type(value)}")
        if "\0" in value:
            raise RemoteExecError(f"'env' value of {name} holds a NUL character")
    return dict(env)


def validated_cwd(cwd: Any) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        raise RemoteExecError(f"'cwd' must be a non-empty path string or null, got {json_type(cwd)}")
    return cwd


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


# ---------------------------------------------------------------- reading stdin


def read_request_line(fd: int, limit: int = MAX_LINE_BYTES) -> tuple[bytes, bytes]:
    """The first line on ``fd`` without its newline, and the bytes read after it (for the stdin watcher). Reads
    with os.read (no buffered reader shared with the stdin watcher)."""
    line = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as e:
            raise RemoteExecError(f"cannot read the request from stdin: {e.strerror or e}") from None
        if not chunk:
            if line:
                raise RemoteExecError("stdin closed in the middle of the request line (no newline)")
            raise RemoteExecError("stdin closed before a request line arrived; expected one JSON line")
        newline = chunk.find(b"\n")
        line += chunk if newline < 0 else chunk[:newline]
        if len(line) > limit:
            raise RemoteExecError(f"the request line is longer than the limit of {limit} bytes")
        if newline >= 0:
            return bytes(line), chunk[newline + 1 :]


def ensure_blocking(fd: int) -> None:
    """Blocking reads on stdin, whatever mode it came in (a non-blocking fd would read as an error)."""
    try:
        os.set_blocking(fd, True)
    except OSError:
        pass


def watch_stdin(fd: int, events: queue.SimpleQueue[tuple[str, int]], pending: bytes = b"") -> None:
    """Read ``fd`` (after the request, whose trailing bytes are ``pending``) line by line until end of file (or
    an error): each notice line is reported, any other named on stderr; then the end is reported."""
    buffer = pending
    try:
        while True:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line + b"\n" == NOTICE_LINE:
                    events.put(("notice", 0))
                elif line.strip():
                    say(f"ignored a line on stdin that is no notice: {line[:80]!r}")
            if len(buffer) > MAX_LINE_BYTES:
                buffer = b""
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffer += chunk
    except OSError:
        pass
    events.put(("eof", 0))


# ---------------------------------------------------------------- the child


def grace_seconds(environ: Mapping[str, str]) -> float:
    try:
        return read_env(environ).remote_grace_s
    except ClipflowError as exc:
        raise RemoteExecError(str(exc)) from None


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **env}


def start_child(request: Request) -> subprocess.Popen[bytes]:
    program = request.argv[0]
    if request.cwd is not None and not os.path.isdir(request.cwd):
        raise RemoteExecError(f"the working directory {request.cwd!r} does not exist (or is not a directory)")
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {NOTICE_SIGNAL}) if request.hold_notice else None
    try:
        return subprocess.Popen(
            request.argv,
            env=child_environment(request.env),
            cwd=request.cwd,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise RemoteExecError(f"command not found: {program!r}", exit_code=127) from None
    except PermissionError:
        raise RemoteExecError(f"permission denied executing {program!r}", exit_code=126) from None
    except OSError as e:
        raise RemoteExecError(f"cannot execute {program!r}: {e.strerror or e}", exit_code=126) from None
    finally:
        if held is not None:  # the child inherited the blocked notice; this process takes signals as before
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def say(message: str) -> None:
    """One line on stderr; never fails (stderr may be a dead ssh channel by now)."""
    try:
        sys.stderr.write(f"{PREFIX}: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def stop_group(child: subprocess.Popen[bytes], exited: threading.Event, grace_s: float) -> None:
    """SIGTERM to the child's group, SIGKILL if the child outlives ``grace_s``, then SIGKILL to leftovers."""
    signal_group(child.pid, signal.SIGTERM)
    if not exited.wait(grace_s):
        say(f"{child.args[0]} (pid {child.pid}) still runs {grace_s:g} s after SIGTERM; sending SIGKILL")
        signal_group(child.pid, signal.SIGKILL)
        exited.wait(KILL_WAIT_S)
    signal_group(child.pid, signal.SIGKILL)


# ---------------------------------------------------------------- supervising


def supervise(request: Request, grace_s: float, stdin_fd: int, pending: bytes = b"") -> int:
    events: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda received, _frame: events.put(("signal", received)))
    child = start_child(request)
    exited = threading.Event()

    def wait_for_child() -> None:
        child.wait()
        exited.set()
        events.put(("exited", 0))

    threading.Thread(target=wait_for_child, name="child-waiter", daemon=True).start()
    watcher = threading.Thread(target=watch_stdin, args=(stdin_fd, events, pending), name="stdin-watcher", daemon=True)
    watcher.start()
    program = f"{request.argv[0]} (pid {child.pid})"
    kind, value = next_event(events)
    while kind == "notice" and not exited.is_set():
        say(f"a notice: passing SIGUSR1 on to {program}")
        signal_group(child.pid, NOTICE_SIGNAL)
        kind, value = next_event(events)
    if kind == "exited" or exited.is_set():
        signal_group(child.pid, signal.SIGKILL)
        return exit_status(child.returncode)
    if kind == "eof":
        say(f"the launcher went away; stopping {program}")
        stop_group(child, exited, grace_s)
        return 128 + signal.SIGTERM
    say(f"received {signal.Signals(value).name}; stopping {program}")
    stop_group(child, exited, grace_s)
    return 128 + value


def next_event(events: queue.SimpleQueue[tuple[str, int]]) -> tuple[str, int]:
    """The next event; waits in slices so that signal handlers in this (main) thread always get to run."""
    while True:
        try:
            return events.get(timeout=EVENT_POLL_S)
        except queue.Empty:
            continue


def main() -> int:
    if sys.argv[1:]:
        say("error: takes no arguments; it reads one JSON request line on stdin (see the module docstring)")
        return 2
    stdin_fd = 0
    try:
        grace_s = grace_seconds(os.environ)
        ensure_blocking(stdin_fd)
        line, pending = read_request_line(stdin_fd)
        return supervise(parse_request(line), grace_s, stdin_fd, pending)
    except RemoteExecError as e:
        say(f"error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    raise SystemExit(main())
