"""Is a TCP port free to bind on this machine?"""

from __future__ import annotations

import socket


def port_free(port: int, address: str = "0.0.0.0") -> bool:
    """True when a listener could bind it now. SO_REUSEADDR, as zmq binds: connections of an earlier
    run lingering in TIME_WAIT do not make a port busy, only a live listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address: str = "0.0.0.0") -> int:
    """A port free right now for the benches' runs: a random one of 10000-19999 that binds. Below the kernel's
    ephemeral range (32768-60999 on Linux), so no outgoing connection or bind to port 0 of another process takes it
    between this answer and its use (the test suite draws from 20000-31999: tests/helpers.py)."""
    import random

    for port in random.sample(range(10000, 20000), 10000):
        if port_free(port, address):
            return port
    raise OSError("no free port in 10000-19999")
