"""The hosts file and inline host lists: which machines the roles may run on.

One host per line::

    # comment lines and blank lines are ignored
    node1                      # trailing comments too
    alice@node2.example.org:2222 slots=4
    [fe80::1]:2222             # IPv6 with a port goes in brackets
    fe80::2                    # a bare IPv6 address means port 22

Each entry is ``[user@]host[:port] [slots=N]``. The host is a name made of RFC 1123 labels
(letters, digits, hyphens, dots), an IPv4 address, or an IPv6 address. The port is 1-65535
(default 22), slots an integer >= 1 (default 1). The same host (user, host, port) may be
listed only once. The inline list ``cluster.hosts`` of the config takes the same entries.

Every error names the line (or the config index), quotes the text and says what is expected.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.textfile import decode, read_bytes

DEFAULT_PORT = 22
ENTRY_FORMAT = "[user@]host[:port] [slots=N]"
KNOWN_OPTIONS = ("slots",)

_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")
_MAX_NAME_LENGTH = 253


@dataclass(frozen=True)
class Host:
    """One machine of the cluster: where to reach it over SSH and how many roles it takes."""

    host: str
    user: str | None = None
    port: int = DEFAULT_PORT
    slots: int = 1

    @property
    def target(self) -> str:
        """``user@host`` or ``host``, as ssh and Fabric take it (the port goes separately)."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        text = f"{self.user}@" if self.user else ""
        if self.port != DEFAULT_PORT:
            host = f"[{self.host}]" if _is_ipv6(self.host) else self.host
            text += f"{host}:{self.port}"
        else:
            text += self.host
        return text + (f" slots={self.slots}" if self.slots != 1 else "")


class _EntryError(Exception):
    """What is wrong with one entry and what is expected instead (the caller adds where and the text)."""

    def __init__(self, problem: str, expected: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.expected = expected


def parse_host(text: str, where: str) -> Host:
    """Parse one entry ``[user@]host[:port] [slots=N]`` (a trailing ``# comment`` is allowed).

    `where` names the input in error messages, e.g. ``hosts.txt line 3`` or ``cluster.hosts[2]``.
    """
    try:
        return _parse_entry(text)
    except _EntryError as err:
        raise ClipflowError(f"{where}: {text!r}: {err.problem}; expected {err.expected}") from None


def parse_hosts(lines: Iterable[str], source: str) -> list[Host]:
    """Parse the lines of a hosts file; `source` (e.g. ``hosts.txt``) names it in error messages."""
    entries: list[tuple[str, str, str, Host]] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if _strip_comment(line).strip():
            host = parse_host(line, f"{source} line {number}")
            entries.append((f"{source} line {number}", f"line {number}", line, host))
    if not entries:
        raise ClipflowError(
            f"{source}: no hosts found (it is empty or has only blank lines and comments); "
            f"expected one host per line as {ENTRY_FORMAT}"
        )
    _reject_duplicates(entries)
    return [host for *_, host in entries]


def read_hosts_file(path: str | Path) -> list[Host]:
    """Read and parse a hosts file; a missing or unreadable file is a ClipflowError naming the path."""
    path = Path(path)
    return parse_hosts(decode(read_bytes(path, "hosts file"), f"hosts file {path}").splitlines(), str(path))


def hosts_from_config(items: Sequence[str]) -> list[Host]:
    """Parse the inline list ``cluster.hosts`` of the config; errors name ``cluster.hosts[i]``."""
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise ClipflowError(f"cluster.hosts: expected a list of hosts such as [node1, alice@node2:2222], got {items!r}")
    if not items:
        raise ClipflowError(f"cluster.hosts is empty; expected at least one host as {ENTRY_FORMAT}")
    entries: list[tuple[str, str, str, Host]] = []
    for index, item in enumerate(items):
        where = f"cluster.hosts[{index}]"
        if not isinstance(item, str):
            raise ClipflowError(f"{where}: expected a string {ENTRY_FORMAT}, got {type(item).__name__} {item!r}")
        entries.append((where, where, item, parse_host(item, where)))
    _reject_duplicates(entries)
    return [host for *_, host in entries]


def _reject_duplicates(entries: list[tuple[str, str, str, Host]]) -> None:
    """Entries are (where, short name, text, host); the same (user, host, port) twice is an error."""
    seen: dict[tuple[str | None, str, int], tuple[str, str]] = {}
    for where, short, text, host in entries:
        key = (host.user, _host_key(host.host), host.port)
        if key in seen:
            first_short, first_text = seen[key]
            raise ClipflowError(
                f"{where}: {text!r} names the same host as {first_short} ({first_text!r}); "
                "expected each host once (use slots=N to run several roles on it)"
            )
        seen[key] = (short, text)


def _host_key(host: str) -> str:
    """Host names compare without case; IP addresses compare by value (``::1`` equals ``0::1``)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def _strip_comment(text: str) -> str:
    return text.split("#", 1)[0]


def _parse_entry(text: str) -> Host:
    tokens = _strip_comment(text).split()
    if not tokens:
        raise _EntryError("no host given", ENTRY_FORMAT)
    user, host, port = _parse_address(tokens[0])
    slots = _parse_options(tokens[1:])
    return Host(host=host, user=user, port=port, slots=slots)


def _parse_address(token: str) -> tuple[str | None, str, int]:
    """``[user@]host[:port]`` -> (user, host, port)."""
    user = None
    if "@" in token:
        user, token = token.split("@", 1)
        _check_user(user)
        if not token:
            raise _EntryError("the host name is missing after '@'", "user@host")
        if "@" in token:
            raise _EntryError("more than one '@'", "at most one '@', between user and host")
    host, port = _split_port(token)
    _check_host(host)
    return user, host, port


def _check_user(user: str) -> None:
    if not user:
        raise _EntryError("the user name is missing before '@'", "user@host, or the host alone")
    if not _USER.fullmatch(user):
        raise _EntryError(
            f"{user!r} is not a valid user name",
            "a user name of letters, digits, '_', '.', '-' not starting with a digit",
        )


def _split_port(token: str) -> tuple[str, int]:
    """host, [ipv6], [ipv6]:port, host:port, or a bare IPv6 address -> (host, port)."""
    if token.startswith("["):
        return _split_bracketed(token)
    if "]" in token:
        raise _EntryError("']' without '['", "an IPv6 address in brackets, as in [fe80::1]:2222")
    if token.count(":") >= 2:
        return _check_ipv6(token), DEFAULT_PORT
    if ":" in token:
        host, port = token.split(":", 1)
        if not host:
            raise _EntryError("the host name is missing before ':'", "host:port")
        return host, _parse_port(port)
    return token, DEFAULT_PORT


def _split_bracketed(token: str) -> tuple[str, int]:
    close = token.find("]")
    if close < 0:
        raise _EntryError("'[' is not closed by ']'", "an IPv6 address in brackets, as in [fe80::1]:2222")
    host, rest = token[1:close], token[close + 1 :]
    host = _check_ipv6(host)
    if not rest:
        return host, DEFAULT_PORT
    if not rest.startswith(":"):
        raise _EntryError(f"unexpected {rest!r} after ']'", "':port' or nothing after the bracketed IPv6 address")
    return host, _parse_port(rest[1:])


def _check_ipv6(text: str) -> str:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        raise _EntryError(
            f"{text!r} is not an IPv6 address", "an IPv6 address such as fe80::1 (in brackets when a port follows)"
        ) from None
    return text


def _parse_port(text: str) -> int:
    expected = "a port number from 1 to 65535 after ':'"
    if not text:
        raise _EntryError("the port is missing after ':'", expected)
    if not _DIGITS.fullmatch(text):
        raise _EntryError(f"the port {text!r} is not a number", expected)
    port = int(text)
    if not 1 <= port <= 65535:
        raise _EntryError(f"the port {port} is out of range", expected)
    return port


def _check_host(host: str) -> None:
    if _is_ipv6(host):
        return  # checked when it was split off
    labels = host.split(".")
    if all(label.isdigit() for label in labels):
        _check_ipv4(host)
        return
    if len(host) > _MAX_NAME_LENGTH or not all(_LABEL.fullmatch(label) for label in labels):
        raise _EntryError(
            f"{host!r} is not a valid host name",
            "a host name of letters, digits, hyphens and dots (RFC 1123), an IPv4 address or an IPv6 address",
        )


def _check_ipv4(host: str) -> None:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise _EntryError(f"{host!r} is not an IPv4 address", "four numbers 0-255 such as 10.0.0.5") from None


def _is_ipv6(host: str) -> bool:
    return ":" in host


def _parse_options(tokens: list[str]) -> int:
    """The ``key=value`` options after the address; only ``slots`` is known. Returns slots."""
    slots = 1
    given: set[str] = set()
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise _EntryError(
                f"unexpected {token!r} after the host", f"options as key=value after the host ({ENTRY_FORMAT})"
            )
        if key not in KNOWN_OPTIONS:
            raise _EntryError(f"unknown option {key!r}", f"only {', '.join(KNOWN_OPTIONS)}=N")
        if key in given:
            raise _EntryError(f"option {key!r} given twice", f"{key}=N once")
        given.add(key)
        slots = _parse_slots(value)
    return slots


def _parse_slots(value: str) -> int:
    if not _DIGITS.fullmatch(value) or int(value) < 1:
        raise _EntryError(f"slots={value!r} is not a whole number >= 1", "slots=N with N an integer >= 1")
    return int(value)
