"""The one place that makes zmq sockets (CURVE keys or resend logic would go here).

Every node talks over DEALER sockets to ROUTER sockets: the scheduler and each
server own a ROUTER; nodes connect DEALERs with an explicit identity so the
ROUTER side can address them. A :class:`Channel` couples a socket with the
message codec and PS_VERBOSE=2 tracing.
"""

from __future__ import annotations

import zmq

from clipflow.errors import ClipflowError
from clipflow.ps.env import is_loopback
from clipflow.ps.log import Log
from clipflow.ps.wire import Message, WireError, decode, encode

INVALID_OP = "_invalid"


def make_context() -> zmq.Context:
    """A fresh context for one process (threads share it; sockets they do not)."""
    return zmq.Context()


def make_socket(ctx: zmq.Context, kind: int, identity: bytes | None = None) -> zmq.Socket:
    """A DEALER or ROUTER with linger 0, unbounded queues and, for ROUTER, loud unroutable sends."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    return sock


def endpoint(host: str, port: int) -> str:
    """tcp:// address for a host name, IPv4 or IPv6 address."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def bind_host(advertised: str) -> str:
    """Interface to bind: loopback stays on loopback, anything else listens on all interfaces."""
    return "127.0.0.1" if is_loopback(advertised) else "*"


def bind(sock: zmq.Socket, host: str, port: int) -> None:
    """Bind ``sock`` to ``port`` on the interface chosen by :func:`bind_host`."""
    try:
        sock.bind(endpoint(bind_host(host), port))
    except zmq.ZMQError as exc:
        raise ClipflowError(f"cannot listen on port {port} ({exc}); is another process using it?") from exc


def bind_random(sock: zmq.Socket, host: str) -> int:
    """Bind ``sock`` to a free port and return it."""
    return sock.bind_to_random_port(f"tcp://{bind_host(host)}")


def connect(sock: zmq.Socket, host: str, port: int) -> None:
    sock.connect(endpoint(host, port))


class Channel:
    """A socket that sends and receives :class:`Message` objects."""

    def __init__(self, sock: zmq.Socket, log: Log, name: str) -> None:
        self.sock = sock
        self.log = log
        self.name = name
        self.is_router = sock.socket_type == zmq.ROUTER

    def send(self, msg: Message, peer: bytes | None = None) -> None:
        """Send ``msg`` (to ``peer`` on a ROUTER). Raises zmq.ZMQError if the peer is unknown."""
        frames = encode(msg)
        if self.is_router:
            if peer is None:
                raise ValueError("a ROUTER channel needs a peer to send to")
            frames.insert(0, peer)
        self.log.trace(f"{self.name} -> {_peer_name(peer)}: {msg.describe()}")
        self.sock.send_multipart(frames, copy=False)

    def try_send(self, msg: Message, peer: bytes | None = None) -> bool:
        """Best-effort send for ABORT/FAIL/DONE: returns False instead of raising."""
        try:
            self.send(msg, peer)
            return True
        except (zmq.ZMQError, WireError) as exc:
            self.log.info(f"could not send {msg.op} to {_peer_name(peer)}: {exc}")
            return False

    def recv(self, timeout_s: float) -> tuple[bytes | None, Message] | None:
        """Next message within ``timeout_s`` as (peer or None, message), else None.

        A malformed message becomes an ``_invalid`` message whose ``reason`` says why,
        so the receiver can answer the sender instead of leaving it waiting.
        """
        if not self.sock.poll(max(0, int(timeout_s * 1000))):
            return None
        return self.recv_ready()

    def recv_ready(self) -> tuple[bytes | None, Message]:
        """Receive one message that poll() said is waiting."""
        frames = self.sock.recv_multipart(copy=False)
        peer = None
        if self.is_router:
            peer = frames[0].bytes
            frames = frames[1:]
        try:
            msg = decode(frames)
        except WireError as exc:
            msg = Message(INVALID_OP, {"reason": f"malformed message: {exc}"})
        self.log.trace(f"{self.name} <- {_peer_name(peer)}: {msg.describe()}")
        return peer, msg

    def close(self, linger_s: float = 0.0) -> None:
        """Close; with ``linger_s`` > 0 give queued messages that long to leave."""
        self.sock.close(linger=int(linger_s * 1000))


def _peer_name(peer: bytes | None) -> str:
    return "peer" if peer is None else peer.decode("utf-8", "replace")
