"""Start every role of a run, merge their output, and end them all on the first failure.

Each process's lines come back prefixed `[role rank host]`, on the console and in
one log file per process. When any process exits non-zero, or the launcher gets
SIGINT or SIGTERM, every other process is sent SIGTERM, then SIGKILL after a grace
period, and the launcher's exit code is the failure's. Processes that only echo a
failure elsewhere (exit status ABORTED) are not taken for its cause while the cause
can still be seen exiting. Nothing is left running. A program that cannot be started
here (not found, not executable) is one ClipflowError naming it and its role, after
the roles started before it are stopped; :func:`program_problem` lets a caller find
it before any role starts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from clipflow.cluster.plan import Role
from clipflow.errors import ClipflowError
from clipflow.made import Made
from clipflow.ps.exitcodes import ABORTED

POLL_S = 0.1
SETTLE_S = 3.0  # after an echo of a failure, how long to wait for the process that caused it
SSH_FAILED = 255  # the OpenSSH client's own failure


@dataclass
class RoleCommand:
    role: Role
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None  # written to the process's stdin, which then stays open until teardown (ssh roles)

    @property
    def tag(self) -> str:
        return f"{self.role.role} {self.role.rank} {self.role.host}"

    @property
    def log_name(self) -> str:
        return f"{self.role.role}-{self.role.rank}.log"


def program_problem(program: str, search_path: str | None = None) -> str | None:
    """Why ``program`` cannot be started here, found as the launcher's exec finds it (a name with a slash as it
    is, from the working folder; any other name on ``search_path``, default PATH), or None when it can."""
    if os.sep not in program:
        if shutil.which(program, path=search_path) is None:
            return "no such program on PATH (or none there that is executable); give its path, or fix PATH"
        return None
    path = Path(program)
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "a folder, not a program"
    if not os.access(path, os.X_OK):
        return "not executable; make it so (chmod +x), or launch it with its interpreter (python FILE ...)"
    return None


def cannot_start(cmd: RoleCommand, exc: OSError) -> ClipflowError:
    """The error for a role whose program could not be started: the program, the role and the reason."""
    reason = program_problem(cmd.argv[0], {**os.environ, **cmd.env}.get("PATH")) or exc.strerror or str(exc)
    return ClipflowError(f"cannot start {cmd.role.role} {cmd.role.rank} on {cmd.role.host}: {cmd.argv[0]}: {reason}")


@dataclass(frozen=True)
class Ending:
    """How a launch ended: its exit ``code``, the ``cause`` in the launcher's words ("" after success), and whether
    a role failed (``failed``: not a success, not a signal to the launcher, which a restart must not undo)."""

    code: int
    cause: str = ""
    failed: bool = False


def describe_exit(code: int, cmd: RoleCommand | None = None) -> str:
    if code == SSH_FAILED and cmd is not None and cmd.argv[:1] == ["ssh"]:
        return f"exit code {code}: the ssh connection to {cmd.role.host} failed or was lost"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Launcher:
    def __init__(
        self, commands: list[RoleCommand], log_dir: str | Path, grace_s: float = 10.0, console: IO[str] | None = None
    ):
        self.commands = commands
        self.log_dir = Path(log_dir)
        self.grace_s = grace_s
        self.console = console or sys.stdout
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []
        self.stop_signal: int | None = None
        self.last_lines: dict[int, str] = {}  # process index -> its last non-empty output line
        self.ending = Ending(0)  # set by run()

    def _claim_logs(self) -> None:
        """The roles' logs (``<role>-<rank>.log``, written anew each run) recorded in the log folder as clipflow's
        (:mod:`clipflow.made`), after a check that none of them is someone else's file there (ClipflowError)."""
        made = Made(self.log_dir, "--log-dir")
        names = [cmd.log_name for cmd in self.commands]
        made.check([], journals=names)
        for name in names:
            made.journal(name)

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.console, flush=True)

    def _pump(self, index: int, cmd: RoleCommand, proc: subprocess.Popen) -> None:
        with open(self.log_dir / cmd.log_name, "w", encoding="utf-8", errors="replace") as log:
            for raw in proc.stdout:  # type: ignore[union-attr]
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                log.write(line + "\n")
                log.flush()
                if line.strip():
                    self.last_lines[index] = line.strip()
                self.say(f"[{cmd.tag}] {line}")

    def _start(self, cmd: RoleCommand) -> None:
        env = {**os.environ, **cmd.env, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.Popen(
                cmd.argv,
                env=env,
                stdin=subprocess.DEVNULL if cmd.stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:  # not found, not executable: run() stops the roles started before this one
            raise cannot_start(cmd, exc) from None
        if cmd.stdin is not None:
            proc.stdin.write(cmd.stdin)  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        self.procs.append(proc)
        reader = threading.Thread(target=self._pump, args=(len(self.procs) - 1, cmd, proc), daemon=True)
        reader.start()
        self.readers.append(reader)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum

    def _terminate_all(self) -> int:
        """SIGTERM every live process group, SIGKILL after the grace period; returns how many were running."""
        live = [p for p in self.procs if p.poll() is None]
        for p in self.procs:  # a remote role ends when its stdin closes (clipflow.cluster.remote_exec)
            if p.stdin is not None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in live:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + (self.grace_s if sig == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline and any(p.poll() is None for p in live):
                time.sleep(POLL_S)
        for p in self.procs:  # children a role left in its group
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(live)

    def run(self) -> int:
        self._claim_logs()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        failure: tuple[RoleCommand, int] | None = None
        try:
            for cmd in self.commands:
                self._start(cmd)
            workers = [i for i, c in enumerate(self.commands) if c.role.role == "worker"]
            workers_done_at: float | None = None
            first_echo_at: float | None = None
            while self.stop_signal is None:
                codes = [p.poll() for p in self.procs]
                bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
                causes = [i for i in bad if codes[i] != ABORTED]
                if causes:
                    failure = (self.commands[causes[0]], codes[causes[0]])  # type: ignore[assignment]
                    break
                if bad:  # only echoes so far: give the cause a moment to exit too
                    first_echo_at = first_echo_at or time.monotonic()
                    if time.monotonic() - first_echo_at > SETTLE_S:
                        failure = (self.commands[bad[0]], codes[bad[0]])  # type: ignore[assignment]
                        break
                if all(c == 0 for c in codes):
                    break
                if all(codes[i] == 0 for i in workers):
                    workers_done_at = workers_done_at or time.monotonic()
                    if time.monotonic() - workers_done_at > self.grace_s:
                        self.say(
                            "clipflow launch: the workers finished but the scheduler or a server did not "
                            f"exit within {self.grace_s:.0f} s; stopping them"
                        )
                        break
                time.sleep(POLL_S)
        finally:
            teardown_began = time.monotonic()
            stopped = self._terminate_all()
            teardown_s = time.monotonic() - teardown_began
            for reader in self.readers:
                reader.join(timeout=5)
            for s, handler in previous.items():
                signal.signal(s, handler)
        if self.stop_signal is not None:
            name = signal.Signals(self.stop_signal).name
            self.say(f"clipflow launch: got {name}; stopped {stopped} running processes in {teardown_s:.1f} s")
            self.ending = Ending(128 + self.stop_signal, f"the launcher got {name}")
            return self.ending.code
        if failure:
            cmd, code = failure
            last = self.last_lines.get(self.commands.index(cmd))
            self.say(
                f"clipflow launch: {cmd.role.role} {cmd.role.rank} on {cmd.role.host} failed "
                f"({describe_exit(code, cmd)}); stopped the {stopped} other running processes in {teardown_s:.1f} s. "
                + (f"Its last line: {last!r}. " if last else "")
                + f"Its log: {self.log_dir / cmd.log_name}"
            )
            cause = f"{cmd.role.role} {cmd.role.rank} on {cmd.role.host} failed ({describe_exit(code, cmd)})"
            self.ending = Ending(code if code > 0 else 128 - code, cause, failed=True)
            return self.ending.code
        self.ending = Ending(0)
        return 0
