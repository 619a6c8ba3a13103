"""A server's or worker's link to the scheduler: registration, control messages, heartbeat.

Each node has two DEALER sockets to the scheduler's ROUTER, with identities
derived from a per-process uid: ``<uid>/c`` (control, main thread: REGISTER,
WELCOME, BARRIER, DONE, FAIL, SHUTDOWN) and ``<uid>/h`` (the heartbeat thread:
HEARTBEAT, its answers, and ABORT). With CURVE security the link also owns the
process's key material and, in a server (which binds a ROUTER), the ZAP
authenticator. With PS_RESEND=1, REGISTER and BARRIER are sent again every
PS_RESEND_TIMEOUT until answered (the scheduler handles repeats idempotently).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from clipflow.errors import ClipflowError, JobAborted
from clipflow.ps.env import PSConfig
from clipflow.ps.heartbeat import Heartbeat, exit_process
from clipflow.ps.log import Log
from clipflow.ps.security import keys_for, start_authenticator, stop_authenticator
from clipflow.ps.shm import machine_id
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
    machine: str = ""  # the server's boot id (clipflow.ps.shm.machine_id)


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
            servers = tuple(ServerAddress(int(r), str(h), int(p), str(m)) for r, h, p, m in msg["servers"])
            return cls(int(msg["rank"]), int(msg["num_server"]), int(msg["num_worker"]), servers)
        except (TypeError, ValueError) as exc:
            raise WireError(f"bad {Op.WELCOME} from the scheduler: {exc}") from None

    def to_fields(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "num_server": self.num_server,
            "num_worker": self.num_worker,
            "servers": [[s.rank, s.host, s.port, s.machine] for s in self.servers],
        }


class NodeLink:
    """Owns the process's zmq context, the control socket and the heartbeat thread."""

    def __init__(self, cfg: PSConfig, role: str, log: Log, on_abort: Callable[[str], None] = exit_process) -> None:
        self.cfg = cfg
        self.role = role
        self.log = log
        self.uid = f"{role}-{cfg.node_host}-{os.getpid()}-{secrets.token_hex(4)}"
        self.keys = keys_for(cfg.security, cfg.keys_dir)
        self.ctx = make_context(malloc_tune=cfg.malloc_tune)
        self.auth = start_authenticator(self.ctx, self.keys) if role == "server" else None
        self.ctrl = Channel(make_socket(self.ctx, zmq.DEALER, ctrl_identity(self.uid), self.keys), log, "scheduler")
        connect(self.ctrl.sock, cfg.root_uri, cfg.root_port)
        self.heartbeat = Heartbeat(self.ctx, cfg, self.uid, hb_identity(self.uid), log, on_abort, self.keys)
        self.closed = False

    @property
    def scheduler(self) -> str:
        return f"scheduler at {self.cfg.root_uri}:{self.cfg.root_port}"

    def register(self, port: int | None = None) -> Welcome:
        """Start the heartbeat, register, and wait (bounded by the startup timeout) for the welcome.

        A startup timeout is a ClipflowError: before the job runs, a missing answer most often means a
        setting (the scheduler's address, the node counts, the security keys), which its message names.
        """
        cfg = self.cfg
        self.heartbeat.start()
        deadline = time.monotonic() + cfg.startup_timeout
        registered = False
        sent_at = 0.0
        fields = {"role": self.role, "host": cfg.node_host, "port": port, "rank": cfg.rank, "machine": machine_id()}
        while True:
            self.check_abort()
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not self.heartbeat.answered.is_set():
                security = f"CLIPFLOW_PS_SECURITY={cfg.security}" + (
                    f", CLIPFLOW_PS_KEYS={cfg.keys_dir}" if self.keys else ""
                )
                raise ClipflowError(
                    f"no answer from the {self.scheduler} within {cfg.startup_timeout:g} s (CLIPFLOW_STARTUP_TIMEOUT): "
                    f"it is not running there, or it does not accept this node's security settings ({security}); "
                    "every node needs the same CLIPFLOW_PS_SECURITY and key folder (CLIPFLOW_PS_KEYS)"
                )
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
                    self.send(Message(Op.REGISTER, dict(fields)))
                    self.log.info(f"registering with the {self.scheduler}")
                    registered = True
                    sent_at = time.monotonic()
                continue
            got = self.ctrl.recv(min(POLL_S, remaining))
            if got is None:
                if cfg.resend and time.monotonic() - sent_at > cfg.resend_timeout:
                    self.send(Message(Op.REGISTER, dict(fields)))
                    sent_at = time.monotonic()
                continue
            msg = got[1]
            if msg.op == Op.WELCOME:
                return Welcome.from_message(msg)
            self._unexpected(msg)

    def wait(self, op: str, seq: int, request: Message | None = None) -> Message:
        """Wait for control message ``op`` answering ``seq``; unbounded but aborts with the job.

        With PS_RESEND=1, ``request`` (already sent once) is sent again every PS_RESEND_TIMEOUT.
        """
        sent_at = time.monotonic()
        while True:
            self.check_abort()
            got = self.ctrl.recv(POLL_S)
            if got is None:
                if request is not None and self.cfg.resend and time.monotonic() - sent_at > self.cfg.resend_timeout:
                    self.send(request)
                    sent_at = time.monotonic()
                continue
            msg = got[1]
            if msg.op == op and msg.get("seq") == seq:
                return msg
            self._unexpected(msg)

    def send(self, msg: Message) -> None:
        """Best effort: a message that cannot leave counts as lost (bounded by the startup/heartbeat timeouts)."""
        msg.fields["uid"] = self.uid
        self.ctrl.try_send(msg)

    def check_abort(self) -> None:
        """Raise JobAborted if the heartbeat thread decided the job is over (when on_abort did not exit)."""
        if self.heartbeat.aborted.is_set():
            raise JobAborted(self.heartbeat.reason)

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
        stop_authenticator(self.auth)
        if not self.heartbeat.is_alive():
            self.ctx.term()

    def _unexpected(self, msg: Message) -> None:
        if msg.op == Op.ABORT:
            raise JobAborted(str(msg.get("reason", "the scheduler aborted the job")))
        self.log.info(f"ignoring unexpected {msg.op} from the scheduler")
