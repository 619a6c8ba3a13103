"""Argument types and argument groups that several command groups share."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.schemas import config_defaults


def json_object(text: str, flag: str = "--overrides") -> dict:
    """A JSON object given on the command line (recipe overrides)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ClipflowError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ClipflowError(f"{flag} must be a JSON object")
    return value


def launched(code: int, what: str, hint: str) -> int:
    """A launch's exit code, after one line naming the failure when it failed."""
    if code:
        print(f"clipflow: error: {what} failed (exit {code}); {hint}", file=sys.stderr)
    return code


def host_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", default="", help="comma-separated [user@]host[:port]")
    p.add_argument("--hosts-file", default="", help="one [user@]host[:port] [slots=N] a line")


def ssh_args(p: argparse.ArgumentParser) -> None:
    cluster = config_defaults("cluster")
    p.add_argument("--ssh-key", default=cluster["ssh_key"], help="the job's ssh key (made when missing)")
    p.add_argument("--known-hosts", default=cluster["known_hosts"], help="the project's pinned host keys")
    p.add_argument("--refuse-new-host-keys", action="store_true", help="refuse hosts not in --known-hosts yet")


def ssh_settings(a: argparse.Namespace):
    """The --ssh-key, --known-hosts and --refuse-new-host-keys of :func:`ssh_args`."""
    from clipflow.cluster.ssh import SshSettings

    return SshSettings(Path(os.path.expanduser(a.ssh_key)), Path(a.known_hosts), accept_new=not a.refuse_new_host_keys)
