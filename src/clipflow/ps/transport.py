"""The one place that makes zmq sockets.

Every node talks over DEALER sockets to ROUTER sockets: the scheduler and each
server own a ROUTER; nodes connect DEALERs with an explicit identity so the
ROUTER side can address them. With CURVE security (:mod:`clipflow.ps.security`)
every ROUTER is a CURVE server and every DEALER a CURVE client. A :class:`Channel`
couples a socket with the message codec, PS_VERBOSE=2 tracing and, on data-plane
channels, the fault injection of CLIPFLOW_PS_DROP_PERCENT (:class:`Dropper`).

Throughput of 100 MB arrays: sends and receives are zero-copy at the Python level
(``copy=False``). Kernel socket buffers stay at the OS default: on loopback, fixed
4 MiB SO_SNDBUF/SO_RCVBUF measured slower than Linux's autotuning. libzmq allocates
a fresh buffer for every message it receives; glibc serves large ones with mmap,
so each 100 MB message costs ~25,000 page faults (measured: a 100 MB round trip on
loopback takes ~200 ms instead of ~50 ms).
:func:`tune_malloc` (on unless ``CLIPFLOW_PS_MALLOC_TUNE=0``) therefore makes glibc
serve and keep such buffers on its heap: one arena, mmap threshold 1 GiB, trim
threshold 2 GiB. The price: up to that much freed memory stays with the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import random
import socket
import sys
from dataclasses import dataclass

import zmq

from clipflow.errors import ClipflowError, CommError
from clipflow.ps.env import is_loopback
from clipflow.ps.foreign import ps_lite_join
from clipflow.ps.log import DropLog, Log
from clipflow.ps.security import Keys, apply
from clipflow.ps.wire import Message, WireError, decode, encode, shown

INVALID_OP = "_invalid"
MXNET_FIX = (
    "an MXNet or other ps-lite script needs its own scheduler and servers: run it with "
    "`clipflow launch --mxnet -n <workers> -s <servers> -- <command>`"
)


class ForeignPeer(CommError):
    """A peer that does not speak clipflow's protocol reached a role while the job starts: the one line that
    names it (its address, what it looks like) and what to do."""


IO_THREADS = 2  # a worker talks to several servers at once


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc mallopt parameters
_malloc_tuned = False


def tune_malloc() -> bool:
    """Make glibc reuse large freed buffers instead of unmapping them (see the module docstring).

    Call before the zmq context starts its I/O threads. Returns False where it does not apply
    (not Linux/glibc) or failed; idempotent.
    """
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return _malloc_tuned
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    done = [mallopt(M_ARENA_MAX, 1), mallopt(M_MMAP_THRESHOLD, 1 << 30), mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)]
    _malloc_tuned = all(done)
    return _malloc_tuned


def make_context(malloc_tune: bool = False) -> zmq.Context:
    """A fresh context for one process (threads share it; sockets they do not).

    ``malloc_tune`` first runs :func:`tune_malloc` (for processes that move large arrays).
    """
    if malloc_tune:
        tune_malloc()
    return zmq.Context(io_threads=IO_THREADS)


def make_socket(ctx: zmq.Context, kind: int, identity: bytes | None = None, keys: Keys | None = None) -> zmq.Socket:
    """A DEALER or ROUTER with linger 0, unbounded queues and, for ROUTER, loud unroutable sends.

    With ``keys`` the socket uses CURVE: a ROUTER as server, a DEALER as client.
    """
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    apply(sock, keys)
    return sock


def endpoint(host: str, port: int) -> str:
    """tcp:// address for a host name, IPv4 or IPv6 address."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def bind_host(advertised: str) -> str:
    """Interface to bind: a loopback address stays on that address (127.0.0.2 is one too), a loopback
    name on 127.0.0.1; anything else listens on all interfaces."""
    if not is_loopback(advertised):
        return "*"
    try:
        address = ipaddress.ip_address(advertised)
    except ValueError:
        return "127.0.0.1"
    return str(address) if address.version == 4 else "127.0.0.1"


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


class Dropper:
    """Fault injection: decides to lose ``percent`` % of the messages a channel receives."""

    def __init__(self, percent: float, seed: int | None = None) -> None:
        self.percent = percent
        self.rng = random.Random(seed)
        self.dropped = 0

    def __call__(self) -> bool:
        if self.percent > 0 and self.rng.random() * 100 < self.percent:
            self.dropped += 1
            return True
        return False


def drop_seed(seed: int | None, role: str, rank: int) -> int | None:
    """A distinct, reproducible fault-injection seed per node (None: random)."""
    return None if seed is None else seed * 1_000_003 + (0 if role == "worker" else 500_000) + rank


@dataclass(frozen=True)
class Sender:
    """Where a received message came from: the peer's IP address (and port where known) and its socket identity."""

    host: str
    port: int | None
    identity: bytes | None

    def __str__(self) -> str:
        address = self.host if self.port is None else f"{self.host}:{self.port}"
        return address if self.identity is None else f"{address} (socket identity {identity_text(self.identity)})"


def sender_of(peer: bytes | None, msg: Message) -> Sender:
    """The sender of ``msg`` as the kernel saw it: zmq's Peer-Address of the frame it came in, and the TCP
    port of that connection while it is still open."""
    frame = msg.origin
    host = None
    if isinstance(frame, zmq.Frame):
        try:
            host = frame.get("Peer-Address")
        except (zmq.ZMQError, UnicodeDecodeError):
            host = None
    if not host:
        return Sender("an unknown address", None, peer)
    return Sender(str(host), _peer_port(frame, str(host)), peer)


def _peer_port(frame: zmq.Frame, host: str) -> int | None:
    """The remote port of the TCP connection ``frame`` came in on (zmq's SRCFD), if it is still open and its
    address is still ``host`` (the descriptor may have been closed and reused since); else None."""
    try:
        fd = frame.get(zmq.SRCFD)
        sock = socket.socket(fileno=fd)
    except (zmq.ZMQError, OSError, ValueError, TypeError):
        return None
    try:
        name = sock.getpeername()
    except OSError:
        return None
    finally:
        sock.detach()  # the descriptor is zmq's: never close it
    if not isinstance(name, tuple) or name[0] != host:
        return None
    return int(name[1])


def identity_text(identity: bytes) -> str:
    """A socket identity for a log line: quoted when it is printable ASCII (a clipflow node's), else in hex."""
    if identity.isascii() and identity.decode("ascii").isprintable():
        return shown(identity.decode("ascii"), 100)
    return "0x" + identity[:32].hex() + ("..." if len(identity) > 32 else "")


class Channel:
    """A socket that sends and receives :class:`Message` objects.

    A receiver drops a message that is malformed or comes from outside the job with :meth:`reject`, which
    logs it naming the sender (:class:`Sender`), a limited number of lines per host (:class:`DropLog`).
    """

    def __init__(self, sock: zmq.Socket, log: Log, name: str, dropper: Dropper | None = None) -> None:
        self.sock = sock
        self.log = log
        self.name = name
        self.is_router = sock.type == zmq.ROUTER
        self.dropper = dropper
        self.drops = DropLog(log)

    def send(self, msg: Message, peer: bytes | None = None) -> None:
        """Send ``msg`` (to ``peer`` on a ROUTER) without blocking.

        Raises zmq.ZMQError if the peer is unknown, zmq.Again if a DEALER has no working
        connection (e.g. while its security handshake keeps failing): queues are unbounded,
        so a send never has to wait otherwise.
        """
        frames = encode(msg)
        if self.is_router:
            if peer is None:
                raise ValueError("a ROUTER channel needs a peer to send to")
            frames.insert(0, peer)
        self.log.trace(f"{self.name} -> {_peer_name(peer)}: {msg.describe()}")
        self.sock.send_multipart(frames, copy=False, flags=zmq.NOBLOCK)

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

    def recv_ready(self) -> tuple[bytes | None, Message] | None:
        """Receive one message that poll() said is waiting; None when fault injection dropped it."""
        frames = received = self.sock.recv_multipart(copy=False)
        peer = None
        if self.is_router:
            peer = frames[0].bytes
            frames = frames[1:]
        if self.dropper is not None and self.dropper():
            self.log.trace(f"{self.name} <- {_peer_name(peer)}: dropped (CLIPFLOW_PS_DROP_PERCENT)")
            return None
        try:
            msg = decode(frames)
        except WireError as exc:
            msg = Message(INVALID_OP, {"reason": f"malformed message: {exc}", "foreign": foreign_protocol(frames)})
        msg.origin = received[0]  # any frame of a message tells its sender's address
        self.log.trace(f"{self.name} <- {_peer_name(peer)}: {msg.describe()}")
        return peer, msg

    def reject(self, peer: bytes | None, msg: Message, why: str) -> None:
        """Drop ``msg`` (received from ``peer``) and log it: ``dropped a <op> from <sender>: <why>``."""
        sender = sender_of(peer, msg)
        what = "a message" if msg.op == INVALID_OP else f"a {msg.op}"
        self.drops.drop(sender.host, f"dropped {what} from {sender}: {why}")

    def reject_malformed(self, peer: bytes | None, msg: Message, starting: bool) -> None:
        """A malformed message (``_invalid``) from a sender outside the job: while the job ``starting``, a ps-lite
        node's first message (:func:`clipflow.ps.foreign.ps_lite_join`: an MXNet script started without
        `clipflow launch --mxnet`) ends this role (:class:`ForeignPeer`, naming the sender and what to do); any
        other is dropped and logged (:meth:`reject`): garbage from a stranger must not end a job, starting or
        running. The one check the scheduler and the servers share."""
        foreign = msg.get("foreign")
        if foreign and starting:
            sender = sender_of(peer, msg)
            raise ForeignPeer(f"a peer at {sender} does not speak clipflow's parameter-server protocol: {foreign}; "
                              f"{MXNET_FIX}")  # fmt: skip
        self.reject(peer, msg, f"{msg.get('reason')}" + (f" ({foreign})" if foreign else ""))

    def close(self, linger_s: float = 0.0) -> None:
        """Close; with ``linger_s`` > 0 give queued messages that long to leave."""
        self.sock.close(linger=int(linger_s * 1000))


def foreign_protocol(frames: list[zmq.Frame] | list[bytes]) -> str:
    """What ``frames`` (a message that did not decode) are when they are a ps-lite node's first message, else
    "" (garbage, or a broken message of clipflow's protocol: both only dropped)."""
    join = ps_lite_join(frames)
    return f"it looks like ps-lite (MXNet's kvstore), {join}" if join else ""


def _peer_name(peer: bytes | None) -> str:
    return "peer" if peer is None else peer.decode("utf-8", "replace")
