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
