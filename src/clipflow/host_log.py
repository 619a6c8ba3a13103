"""Each role's own log, kept on its host, with a checksum written when the process exits.

The launcher streams every role's output back to the launching machine; collection
(:mod:`clipflow.collect`) wants a copy made where the role ran, whose checksum the role
itself recorded. With ``CLIPFLOW_HOST_LOG=<path>`` set (the launcher sets it for every
role, relative to the role's working folder on its host), the clipflow process copies
every line it writes to stdout and stderr into that file and, when it exits (normally
or through an exception), records ``<path>.sha256``. What a killed process (SIGKILL)
leaves has no checksum, so collection names it. Output written below Python (C
libraries writing to the file descriptors directly) reaches only the launcher's log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import IO

from clipflow.checksums import checksum_path, record_checksum
from clipflow.environment import NAMES, read_env
from clipflow.errors import ClipflowError

ENV = NAMES["host_log"]
FOLDER = "on-host"  # beside the launcher's logs of a run: <log-dir>/on-host/<role>-<rank>.log


def host_log_dir(log_dir: str | Path) -> str:
    """Where the roles keep their own logs for a launcher's ``--log-dir``: on each role's host, relative to the
    role's working folder there when ``log_dir`` is relative."""
    return str(Path(log_dir) / FOLDER)


def host_log_path(log_dir: str | Path, role: str, rank: int) -> str:
    return f"{host_log_dir(log_dir)}/{role}-{rank}.log"


class _Tee:
    """A text stream that writes to the console stream and to the host log (flushed at each write, so a forked
    child never repeats a parent's buffered text)."""

    def __init__(self, stream: IO[str], log: IO[str], lock: threading.Lock, console_err: IO[str]) -> None:
        self._stream = stream
        self._log = log
        self._lock = lock
        self._console_err = console_err  # where the warning goes when the log cannot be written

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with self._lock:
            if not self._log.closed:
                try:
                    self._log.write(text)
                    self._log.flush()
                except OSError as exc:  # a full disk: the console keeps the rest, the process goes on
                    self._give_up(exc)
        return written

    def _give_up(self, exc: OSError) -> None:
        with contextlib.suppress(OSError):
            self._log.close()  # closed even when its last flush fails: neither stream writes to it again
        self._console_err.write(f"clipflow: warning: the host log {self._log.name} ends here ({exc.strerror or exc})\n")

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def start_from_env(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Tees stdout and stderr into ``$CLIPFLOW_HOST_LOG`` until exit; returns its path (None when unset)."""
    path = read_env(environ).host_log
    environ.pop(ENV, None)  # this process's alone: a clipflow process it starts keeps no copy of it
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        checksum_path(path).unlink(missing_ok=True)  # an earlier run's: a killed process must leave none
        log = open(path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed at exit)
    except OSError as exc:
        print(f"clipflow: warning: cannot keep this process's log in {ENV}={path} ({exc})", file=sys.stderr)
        return None
    lock = threading.Lock()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(streams[0], log, lock, streams[1]), _Tee(streams[1], log, lock, streams[1])
    pid = os.getpid()

    def finish() -> None:
        if os.getpid() != pid:  # a forked child exiting: the parent owns the log
            return
        sys.stdout, sys.stderr = streams
        try:
            with lock:
                log.close()
            record_checksum(path)
        except (OSError, ClipflowError) as exc:  # a full disk (DiskFull) included
            print(f"clipflow: warning: cannot record the checksum of {path} ({exc})", file=sys.stderr)

    atexit.register(finish)
    return path
