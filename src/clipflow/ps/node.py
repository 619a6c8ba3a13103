"""A server's or worker's link to the scheduler: registration, control messages, heartbeat.

Each node has two DEALER sockets to the scheduler's ROUTER, with identities
derived from a per-process uid: ``<uid>/c`` (control, main thread: REGISTER,
WELCOME, BARRIER, DONE, FAIL, SHUTDOWN) and ``<uid>/h`` (the heartbeat thread:
HEARTBEAT, its answers, and ABORT).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from clipflow.errors import ClipflowError
from clipflow.ps.env import PSConfig
from clipflow.ps.heartbeat import Heartbeat, exit_process
from clipflow.ps.log import Log
from clipflow.ps.transport import Channel, connect, make_context, make_socket
from clipflow.ps.wire import Message, Op, WireError

POLL_S = 0.1


def ctrl_identity(uid: str) -> bytes:
    return f"{uid}/c".encode()


def hb_identity(uid: str) -> bytes:
    return f"{uid}/h".encode()


def uid_of(identity: bytes) -> str:
    """The node uid behind either of its socket identities."""
    return identity.decode("utf-8", "replace").rsplit("/", 1)[0]


@dataclass(frozen=True)
class ServerAddress:
    rank: int
    host: str
    port: int


@dataclass(frozen=True)
class Welcome:
    """What the scheduler tells each node once everyone has registered."""

    rank: int
    num_server: int
    num_worker: int
    servers: tuple[ServerAddress, ...]

    @classmethod
    def from_message(cls, msg: Message) -> Welcome:
        try:
            servers = tuple(ServerAddress(int(r), str(h), int(p)) for r, h, p in msg["servers"])
            return cls(int(msg["rank"]), int(msg["num_server"]), int(msg["num_worker"]), servers)
        except (TypeError, ValueError) as exc:
            raise WireError(f"bad welcome: {exc}") from None

    def to_fields(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "num_server": self.num_server,
            "num_worker": self.num_worker,
            "servers": [[s.rank, s.host, s.port] for s in self.servers],
        }


class NodeLink:
    """Owns the process's zmq context, the control socket and the heartbeat thread."""

    def __init__(self, cfg: PSConfig, role: str, log: Log, on_abort: Callable[[str], None] = exit_process) -> None:
        self.cfg = cfg
        self.role = role
        self.log = log
        self.uid = f"{role}-{cfg.node_host}-{os.getpid()}-{secrets.token_hex(4)}"
        self.ctx = make_context()
        self.ctrl = Channel(make_socket(self.ctx, zmq.DEALER, ctrl_identity(self.uid)), log, "scheduler")
        connect(self.ctrl.sock, cfg.root_uri, cfg.root_port)
        self.heartbeat = Heartbeat(self.ctx, cfg, self.uid, hb_identity(self.uid), log, on_abort)
        self.closed = False

    @property
    def scheduler(self) -> str:
        return f"scheduler at {self.cfg.root_uri}:{self.cfg.root_port}"

    def register(self, port: int | None = None) -> Welcome:
        """Start the heartbeat, register, and wait (bounded by the startup timeout) for the welcome."""
        cfg = self.cfg
        self.heartbeat.start()
        deadline = time.monotonic() + cfg.startup_timeout
        registered = False
        while True:
            self.check_abort()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ClipflowError(
                    f"no welcome from the {self.scheduler} within {cfg.startup_timeout:g} s "
                    f"(CLIPFLOW_STARTUP_TIMEOUT): check that it runs and that all {cfg.num_server} servers "
                    f"(DMLC_NUM_SERVER) and {cfg.num_worker} workers (DMLC_NUM_WORKER) were started"
                )
            if not registered:
                # register only once the heartbeat socket is known to the scheduler, so it can reach us
                # with ABORT even if it rejects the registration straight away
                if self.heartbeat.answered.wait(min(POLL_S, remaining)):
                    fields = {"role": self.role, "host": cfg.node_host, "port": port, "rank": cfg.rank}
                    self.send(Message(Op.REGISTER, fields))
                    self.log.info(f"registering with the {self.scheduler}")
                    registered = True
                continue
            got = self.ctrl.recv(min(POLL_S, remaining))
            if got is None:
                continue
            msg = got[1]
            if msg.op == Op.WELCOME:
                return Welcome.from_message(msg)
            self._unexpected(msg)

    def wait(self, op: str, seq: int) -> Message:
        """Wait for control message ``op`` answering ``seq``; unbounded but aborts with the job."""
        while True:
            self.check_abort()
            got = self.ctrl.recv(POLL_S)
            if got is None:
                continue
            msg = got[1]
            if msg.op == op and msg.get("seq") == seq:
                return msg
            self._unexpected(msg)

    def send(self, msg: Message) -> None:
        msg.fields["uid"] = self.uid
        self.ctrl.send(msg)

    def check_abort(self) -> None:
        """Raise if the heartbeat thread decided the job is over (when on_abort did not exit)."""
        if self.heartbeat.aborted.is_set():
            raise ClipflowError(f"aborting: {self.heartbeat.reason}")

    def fail(self, reason: str) -> None:
        """Best effort: tell the scheduler this node hit an error, so it tears the job down.

        Stops the heartbeat first: the scheduler's ABORT echo must not end the process mid-cleanup.
        """
        self.heartbeat.stop()
        if not self.closed:
            self.ctrl.try_send(Message(Op.FAIL, {"uid": self.uid, "reason": reason}))

    def done(self) -> None:
        """Best effort: tell the scheduler this worker finished."""
        if not self.closed:
            self.ctrl.try_send(Message(Op.DONE, {"uid": self.uid}))

    def stop_heartbeat(self) -> None:
        self.heartbeat.stop()

    def close(self, linger_s: float = 1.0) -> None:
        """Stop the heartbeat, flush queued control messages for up to ``linger_s``, end the context.

        Other sockets made from :attr:`ctx` must be closed first.
        """
        if self.closed:
            return
        self.closed = True
        self.heartbeat.stop()
        self.ctrl.close(linger_s)
        if not self.heartbeat.is_alive():
            self.ctx.term()

    def _unexpected(self, msg: Message) -> None:
        if msg.op == Op.ABORT:
            raise ClipflowError(f"aborting: {msg.get('reason', 'the scheduler aborted the job')}")
        self.log.info(f"ignoring unexpected {msg.op} from the scheduler")
