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
