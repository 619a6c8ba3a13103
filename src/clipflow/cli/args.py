"""Argument types and argument groups that several command groups share."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.schemas import config_defaults, config_setting


def json_object(text: str, flag: str = "--overrides") -> dict:
    """A JSON object given on the command line (recipe overrides)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ClipflowError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ClipflowError(f"{flag} must be a JSON object")
    return value


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals end as every other bad input's do: one line naming the command, the
    argument and its value, ``clipflow: error: cluster plan: argument --root-port: '70000' is not a port ...``,
    exit status 2 (argparse's own prints the usage first and names the program differently)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("clipflow").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"clipflow: error: {where}{message} (see {self.prog} --help)\n")


def port(text: str) -> int:
    """An argument type: the scheduler's port, in the range the config schema gives cluster.root_port."""
    node = config_setting("cluster", "root_port")
    low, high = node["minimum"], node["maximum"]
    value = _whole(text)
    if value is None or not low <= value <= high:
        privileged = " (below 1024 only root may listen)" if value is not None and 0 < value < low else ""
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port in {low}-{high}{privileged}; give a free port in that range, "
            f"e.g. {node['default']}"
        )
    return value


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argument type: a whole number from ``low`` (to ``high``)."""

    def parse(text: str) -> int:
        value = _whole(text)
        if value is None or value < low or (high is not None and value > high):
            bound = f"in {low}-{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number {bound}; give one {bound}")
        return value

    return parse


def setting(*path: str) -> Callable[[str], int]:
    """An argument type: a whole number in the range the config schema gives the setting at ``path`` (the flag of
    a setting config.yaml also has, checked as the config's value is)."""
    node = config_setting(*path)
    return whole(node.get("minimum", -(2**63)), node.get("maximum"))


count = whole(1)  # workers, servers, classes, an epoch


def above_zero(what: str, example: str) -> Callable[[str], float]:
    """An argument type: a finite number > 0, ``what`` in its refusal (with ``example``)."""

    def parse(text: str) -> float:
        value = _finite(text)
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} > 0; give one such as {example}")
        return value

    return parse


seconds = above_zero("a number of seconds", "30")  # a timeout
positive = above_zero("a finite number", "0.5")  # a threshold, a rate


def number_setting(*path: str) -> Callable[[str], float]:
    """An argument type: a finite number in the range the config schema gives the setting at ``path``."""
    node = config_setting(*path)
    low, high = node.get("exclusiveMinimum"), node.get("maximum")

    def parse(text: str) -> float:
        value = _finite(text)
        if value is None or (low is not None and value <= low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number more than {low} and at most {high}; give one such as {node['default']}"
            )
        return value

    return parse


def at_least_zero(text: str) -> float:
    """An argument type: a finite number >= 0 (a grace period, a size)."""
    value = _finite(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0; give 0 or more")
    return value


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


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
    from clipflow.hosts.ssh import SshSettings

    return SshSettings(Path(os.path.expanduser(a.ssh_key)), Path(a.known_hosts), accept_new=not a.refuse_new_host_keys)
