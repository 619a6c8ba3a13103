"""A small Python script run on a host over an open ssh connection, the way the host checks and the staging
stage ask a host what they need to know: the request as JSON on the script's stdin (no length limit, nothing on
a command line), the answer as one JSON line the script prints after :data:`REPLY`."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import paramiko

if TYPE_CHECKING:
    from fabric import Connection

REPLY = "CLIPFLOW_REPLY "  # what the answer's line starts with (the scripts print it so)


class RemoteScriptError(Exception):
    """The script did not answer: ``why`` is its last error line, its exit status, or the lost connection."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def run_remote_python(conn: Connection, python: str, script: str, payload: dict, timeout_s: float) -> dict:
    """Runs ``script`` with ``python`` on the connection's host, ``payload`` on its stdin; the object it answered."""
    try:
        stdin, stdout, stderr = conn.client.exec_command(shlex.join([python, "-c", script]), timeout=timeout_s)
        stdin.write(json.dumps(payload))
        stdin.flush()
        stdin.channel.shutdown_write()
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
        status = stdout.channel.recv_exit_status()
    except (OSError, EOFError, paramiko.SSHException) as exc:  # a timeout is an OSError too
        raise RemoteScriptError(f"no answer: {exc or type(exc).__name__}") from None
    line = next((x for x in out.splitlines() if x.startswith(REPLY)), None)
    if status != 0 or line is None:
        raise RemoteScriptError((err.strip().splitlines() or [f"exit status {status}"])[-1])
    return json.loads(line.removeprefix(REPLY))
