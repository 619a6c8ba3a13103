"""stderr logging for parameter-server processes, gated by PS_VERBOSE."""

from __future__ import annotations

import sys
import time


class Log:
    """Prefixes lines with the node's name; level 1 = connections, 2 = every message."""

    def __init__(self, who: str, verbose: int = 0) -> None:
        self.who = who
        self.verbose = verbose

    def error(self, text: str) -> None:
        """Always printed."""
        self._write(text)

    def note(self, text: str) -> None:
        """Always printed: a fact said once (how this node works), not an error."""
        self._write(text)

    def info(self, text: str) -> None:
        """Printed when PS_VERBOSE >= 1 (registration, connections, shutdown)."""
        if self.verbose >= 1:
            self._write(text)

    def trace(self, text: str) -> None:
        """Printed when PS_VERBOSE >= 2 (every message)."""
        if self.verbose >= 2:
            self._write(text)

    def _write(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"clipflow ps [{self.who}] {stamp}: {text}", file=sys.stderr, flush=True)


def print_abort(reason: str) -> None:
    """The one line a node prints when the cluster is torn down."""
    print(f"clipflow ps: aborting: {reason}", file=sys.stderr, flush=True)


class DropLog:
    """Lines about messages dropped on receipt (malformed, or from a sender outside the job), at most
    :attr:`LIMIT` per sender host, so that a flood cannot flood the log; :attr:`count` counts them all."""

    LIMIT = 20
    MAX_HOSTS = 1024  # hosts whose lines are counted; further ones share one count

    def __init__(self, log: Log) -> None:
        self.log = log
        self.count = 0
        self._per_host: dict[str, int] = {}

    def drop(self, host: str, text: str) -> None:
        """Count a dropped message from ``host``; log ``text`` unless that host had its LIMIT of lines."""
        self.count += 1
        if host not in self._per_host and len(self._per_host) >= self.MAX_HOSTS:
            host = "other hosts"
        seen = self._per_host.get(host, 0)
        self._per_host[host] = seen + 1
        if seen < self.LIMIT:
            self.log.error(text)
        elif seen == self.LIMIT:
            self.log.error(f"more messages from {host} dropped: counted, no longer logged one by one")

    def summary(self) -> None:
        """One line with the total, if anything was dropped."""
        if self.count:
            self.log.error(f"dropped {self.count} messages in all (malformed, or from senders outside the job)")
