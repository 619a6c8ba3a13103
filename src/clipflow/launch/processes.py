"""Start every role of a run, merge their output, and end them all on the first failure.

Each process's lines come back prefixed `[role rank host]`, on the console and in
one log file per process. When any process exits non-zero, or the launcher gets
SIGINT, SIGTERM or SIGUSR1, every other process is sent SIGTERM, then SIGKILL after a
grace period, and the launcher's exit code is the failure's (128 + the signal's).

A :class:`NoticePolicy` makes some of those signals a notice instead (a spot reclaim,
Slurm's ``--signal=USR1@120``): the launcher passes SIGUSR1 on to every worker (a local
or srun role: its process group; an ssh role: a notice line to its supervisor,
:mod:`clipflow.launch.remote_exec`) and waits up to the policy's seconds for the
workers to end. Training workers (`clipflow train launch`: SIGTERM and SIGUSR1) finish
their step, rank 0 checkpoints, and all exit RESUMABLE: the launcher stops the rest and
exits RESUMABLE with one line saying where it stopped (a worker that got the notice
straight from Slurm or the system and exits RESUMABLE is taken the same way). The
programs of `clipflow launch` (SIGUSR1 only) do what they do with it. A second signal,
or workers still running when the time is up, falls back to the teardown above.
SIGINT always stops at once. Given a time limit (the link check's all-reduce), the launcher stops everything
once it has passed, and says so. Processes that only echo a
failure elsewhere (exit status ABORTED) are not taken for its cause while the cause
can still be seen exiting. Nothing is left running, even when the launcher is killed: every process starts
tethered to it (:mod:`clipflow.launch.tether`) and gets SIGTERM when it dies. A program that cannot be started
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

from clipflow.errors import ABORTED, RESUMABLE, ClipflowError
from clipflow.hosts.plan import Role
from clipflow.launch.notice import HELD, STOPPED
from clipflow.launch.remote_exec import NOTICE_LINE
from clipflow.launch.tether import tethered_argv
from clipflow.made import Made

POLL_S = 0.1
# After an echo of a failure (exit ABORTED), how long to wait for the process that caused it: a worker that
# told the scheduler and printed its error can take seconds more to exit (torch's and zmq's teardown), over 3 s
# on a loaded machine (CI: the scheduler's 75 was taken for the cause of a missing video's exit 2)
SETTLE_S = 15.0
SSH_FAILED = 255  # the OpenSSH client's own failure
TIMED_OUT = 124  # past the launcher's time limit (as timeout(1) exits)


@dataclass
class RoleCommand:
    role: Role
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None  # written to the process's stdin, which then stays open until teardown (ssh roles)
    hold_notice: bool = False  # started with SIGUSR1 blocked: the program unblocks it once its handler is in place

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


def cannot_start(cmd: RoleCommand, reason: str) -> ClipflowError:
    """The error for a role whose program cannot be started: the program, the role and the reason."""
    return ClipflowError(f"cannot start {cmd.role.role} {cmd.role.rank} on {cmd.role.host}: {cmd.argv[0]}: {reason}")


@dataclass(frozen=True)
class Ending:
    """How a launch ended: its exit ``code``, the ``cause`` in the launcher's words ("" after success), and whether
    a role failed (``failed``: not a success, not a signal to the launcher, which a restart must not undo, and not
    during a stop on notice, which a restart must not undo either)."""

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


TRAIN_NOTICE = frozenset({signal.SIGTERM, signal.SIGUSR1})
FORWARD_NOTICE = frozenset({signal.SIGUSR1})
STOPPED_PREFIX = STOPPED.split("{", 1)[0]  # how a training worker's line about its stop begins


@dataclass(frozen=True)
class NoticePolicy:
    """Which of the launcher's signals are a notice for the workers, and how many seconds they get to end."""

    signals: frozenset[int]
    seconds: float
    deadline: float | None = None  # a monotonic time at which the launcher gives the notice itself (a time limit)


class Launcher:
    def __init__(
        self,
        commands: list[RoleCommand],
        log_dir: str | Path,
        grace_s: float = 10.0,
        console: IO[str] | None = None,
        notice: NoticePolicy | None = None,
        time_limit_s: float | None = None,
    ):
        self.commands = commands
        self.time_limit_s = time_limit_s  # everything is stopped once this many seconds have passed (a probe's bound)
        self.log_dir = Path(log_dir)
        self.grace_s = grace_s
        self.console = console or sys.stdout
        self.notice = notice
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []
        self.stop_signal: int | None = None
        self.notice_signal: int | None = None  # the signal taken as a notice, not yet passed on
        self.notice_at: float | None = None  # when the workers were told (or one stopped on a notice of its own)
        self.last_lines: dict[int, str] = {}  # process index -> its last non-empty output line
        self.ending = Ending(0)  # set by run()
        self.stopped_line: str | None = None  # a training worker's line saying where it stopped on notice

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
                if line.startswith(STOPPED_PREFIX):
                    self.stopped_line = line.strip()
                self.say(f"[{cmd.tag}] {line}")

    def _start(self, cmd: RoleCommand) -> None:
        env = {**os.environ, **cmd.env, "PYTHONUNBUFFERED": "1"}
        problem = program_problem(cmd.argv[0], env.get("PATH"))  # found as the exec in tethered_argv finds it
        if problem:  # run() stops the roles started before this one
            raise cannot_start(cmd, problem)
        held = cmd.hold_notice and cmd.stdin is None  # an ssh role's is held by its supervisor
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD) if held else None  # the child inherits the mask
        try:
            proc = subprocess.Popen(
                tethered_argv(cmd.argv, env),  # it ends with the launcher, even a killed one
                env=env,
                stdin=subprocess.DEVNULL if cmd.stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise cannot_start(cmd, exc.strerror or str(exc)) from None
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if cmd.stdin is not None:
            proc.stdin.write(cmd.stdin)  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        self.procs.append(proc)
        reader = threading.Thread(target=self._pump, args=(len(self.procs) - 1, cmd, proc), daemon=True)
        reader.start()
        self.readers.append(reader)

    def _on_signal(self, signum: int, _frame: object) -> None:
        first = self.notice_signal is None and self.notice_at is None
        if self.notice is not None and signum in self.notice.signals and first:
            self.notice_signal = signum  # passed on by the main loop
        else:
            self.stop_signal = signum

    def _deadline_passed(self) -> bool:
        """Whether the notice policy's deadline has come, with no notice given or taken yet (a worker that said it
        stopped got one of its own, from Slurm say, and may be exiting: another SIGUSR1 would kill it there)."""
        deadline = self.notice.deadline if self.notice is not None else None
        first = self.notice_signal is None and self.notice_at is None and self.stopped_line is None
        return first and deadline is not None and time.monotonic() >= deadline

    def _pass_notice(self, workers: list[int]) -> None:
        """SIGUSR1 to every running worker: its process group, or a notice line to an ssh role's supervisor."""
        self.notice_at = time.monotonic()
        told = 0
        for i in workers:
            proc = self.procs[i]
            if proc.poll() is not None:
                continue
            try:
                if proc.stdin is not None:
                    proc.stdin.write(NOTICE_LINE)
                    proc.stdin.flush()
                else:
                    os.killpg(proc.pid, signal.SIGUSR1)
                told += 1
            except (OSError, ProcessLookupError):
                pass
        name = signal.Signals(self.notice_signal).name  # type: ignore[arg-type]
        self.say(f"clipflow launch: got {name}: a notice; passed SIGUSR1 on to {told} workers, which get "
                 f"{self.notice.seconds:g} s to stop")  # type: ignore[union-attr]  # fmt: skip

    def _ended(self, index: int, code: int | None, workers: list[int]) -> bool:
        """Whether a process's exit is no failure: 0, or after a notice a worker's RESUMABLE (or its death by the
        SIGUSR1 passed on, from a program that does not take it)."""
        if code == 0:
            return True
        killed_by_notice = (-signal.SIGUSR1, 128 + signal.SIGUSR1)  # here; an srun step's task (srun's own code)
        return self.notice_at is not None and index in workers and code in (RESUMABLE, *killed_by_notice)

    def _terminate_all(self) -> int:
        """SIGTERM every live process group, SIGKILL after the grace period; returns how many were running."""
        live = [p for p in self.procs if p.poll() is None]
        for p in self.procs:  # a remote role ends when its stdin closes (clipflow.launch.remote_exec)
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
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
        failure: tuple[RoleCommand, int] | None = None
        workers = [i for i, c in enumerate(self.commands) if c.role.role == "worker"]
        began = time.monotonic()
        late = False
        try:
            for cmd in self.commands:
                self._start(cmd)
            workers_done_at: float | None = None
            first_echo_at: float | None = None
            while self.stop_signal is None:
                if self.time_limit_s is not None and time.monotonic() - began > self.time_limit_s:
                    late = True
                    break
                if self._deadline_passed():
                    self.notice_signal = signal.SIGUSR1
                    self.say("clipflow launch: the Slurm job's time limit is near (--slurm-notice): a notice")
                if self.notice_signal is not None and self.notice_at is None:
                    self._pass_notice(workers)
                codes = [p.poll() for p in self.procs]
                if self.notice_at is None and any(codes[i] == RESUMABLE for i in workers):
                    self.notice_at = time.monotonic()  # a worker got a notice of its own (from Slurm, say)
                bad = [i for i, c in enumerate(codes) if c is not None and not self._ended(i, c, workers)]
                causes = [i for i in bad if codes[i] != ABORTED]
                if causes:
                    failure = (self.commands[causes[0]], codes[causes[0]])  # type: ignore[assignment]
                    break
                if bad:  # only echoes so far: give the cause a moment to exit too
                    first_echo_at = first_echo_at or time.monotonic()
                    if time.monotonic() - first_echo_at > SETTLE_S:
                        failure = (self.commands[bad[0]], codes[bad[0]])  # type: ignore[assignment]
                        break
                if all(c is not None and self._ended(i, c, workers) for i, c in enumerate(codes)):
                    break
                if all(codes[i] is not None and self._ended(i, codes[i], workers) for i in workers):
                    workers_done_at = workers_done_at or time.monotonic()
                    linger = self.grace_s  # after a notice: within the notice's time, in all
                    if self.notice_at is not None:
                        linger = self.notice_at + self.notice_s - workers_done_at
                    if time.monotonic() - workers_done_at > linger:
                        self.say(
                            "clipflow launch: the workers finished but the scheduler or a server did not "
                            f"exit within {self.grace_s:.0f} s; stopping them"
                        )
                        break
                elif self.notice_at is not None and time.monotonic() - self.notice_at > self.notice_s:
                    self.say(f"clipflow launch: the workers did not stop within {self.notice_s:g} s of the notice; "
                             "stopping everything")  # fmt: skip
                    self.stop_signal = self.notice_signal or signal.SIGTERM
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
        if late:
            self.say(f"clipflow launch: not done within {self.time_limit_s:g} s; stopped {stopped} running processes "
                     f"in {teardown_s:.1f} s")  # fmt: skip
            self.ending = Ending(TIMED_OUT, f"not done within {self.time_limit_s:g} s", failed=True)
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
            if self.notice_at is not None:  # the notice says this machine may go: no restart here
                self.say("clipflow launch: the failure came while the job stopped on notice, so the launch ends "
                         "here without a restart; rerun the same command to go on")  # fmt: skip
                cause = f"{cause} while stopping on notice"
            self.ending = Ending(code if code > 0 else 128 - code, cause, failed=self.notice_at is None)
            return self.ending.code
        if self.notice_at is not None:
            code = self._after_notice(workers, stopped, teardown_s)
            self.ending = Ending(code, "" if code == 0 else "stopped on notice")
            return code
        self.ending = Ending(0)
        return 0

    @property
    def notice_s(self) -> float:
        return self.notice.seconds if self.notice is not None else self.grace_s

    def _after_notice(self, workers: list[int], stopped: int, teardown_s: float) -> int:
        """The exit code and line once every worker ended after a notice: RESUMABLE when all stopped so, 0 when
        they all exited 0 (a run that finished first; a program of `clipflow launch` that ends cleanly on it), else
        128 + the notice's signal."""
        name = signal.Signals(self.notice_signal).name if self.notice_signal else "a notice"
        codes = [self.procs[i].returncode for i in workers]
        took = time.monotonic() - self.notice_at  # type: ignore[operator]
        if all(code == RESUMABLE for code in codes):
            where = self.stopped_line or "stopped on notice"
            self.say(f"clipflow launch: got {name}: {where} ({took:.1f} s after the notice; "
                     f"exit {RESUMABLE}: resumable)")  # fmt: skip
            return RESUMABLE
        if all(code == 0 for code in codes):
            self.say(f"clipflow launch: got {name}; every worker then exited 0 (done)")
            return 0
        self.say(f"clipflow launch: got {name}; the workers ended ({', '.join(describe_exit(c) for c in codes)}) "
                 f"within {took:.1f} s; stopped {stopped} other running processes in {teardown_s:.1f} s")  # fmt: skip
        return 128 + (self.notice_signal or signal.SIGTERM)
