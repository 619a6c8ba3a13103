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
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from clipflow.errors import ClipflowError, JobAborted
from clipflow.ps.env import HOST, PSConfig
from clipflow.ps.heartbeat import Heartbeat, exit_process
from clipflow.ps.log import Log
from clipflow.ps.security import insecure_warning, keys_for, start_authenticator, stop_authenticator
from clipflow.ps.shm import machine_id
from clipflow.ps.transport import INVALID_OP, Channel, connect, make_context, make_socket
from clipflow.ps.wire import Message, Op, WireError, shown

POLL_S = 0.1
NODE_ROLES = ("server", "worker")
MACHINE = re.compile(r"[A-Za-z0-9-]{0,64}")  # a kernel boot id (clipflow.ps.shm.machine_id), or ''
UID = re.compile(r"[A-Za-z0-9._:%\[\]-]{1,400}")  # NodeLink.uid


def ctrl_identity(uid: str) -> bytes:
    return f"{uid}/c".encode()


def hb_identity(uid: str) -> bytes:
    return f"{uid}/h".encode()


def member_uid(identity: bytes) -> str | None:
    """The node uid behind a control (``<uid>/c``) or heartbeat (``<uid>/h``) socket identity; None for any
    other identity (a socket that is no clipflow node's)."""
    uid, sep, kind = identity.decode("utf-8", "replace").rpartition("/")
    return uid if sep and uid and kind in ("c", "h") else None


def data_identity(uid: str, server_rank: int) -> bytes:
    """A worker's socket identity towards server ``server_rank``."""
    return f"{uid}/d{server_rank}".encode()


@dataclass(frozen=True)
class Registration:
    """What a server or worker tells the scheduler in its REGISTER."""

    role: str
    host: str
    port: int | None
    rank: int | None
    machine: str = ""

    @classmethod
    def from_message(cls, msg: Message) -> Registration:
        """The registration in ``msg``; WireError naming the field when it is not one a node sends."""
        role = msg.text("role")
        if role not in NODE_ROLES:
            raise WireError(f"{Op.REGISTER}: role must be 'server' or 'worker', got {shown(role)}")
        port = msg.integer("port", 1, 65535, default=None)
        if role == "server" and port is None:
            raise WireError(f"{Op.REGISTER}: a server must give the port it serves on")
        return cls(
            role,
            msg.text("host", HOST),
            port,
            msg.integer("rank", 0, default=None),
            msg.text("machine", MACHINE, default=""),
        )

    def to_fields(self) -> dict[str, object]:
        return {"role": self.role, "host": self.host, "port": self.port, "rank": self.rank, "machine": self.machine}


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
    workers: tuple[str, ...] = ()  # to a server: the workers' uids by rank, so it serves them and no one else
    groups: tuple[int, ...] = ()  # each worker rank's host group (see host_groups); empty: one group per worker

    @classmethod
    def from_message(cls, msg: Message) -> Welcome:
        try:
            servers = tuple(ServerAddress(int(r), str(h), int(p), str(m)) for r, h, p, m in msg["servers"])
            workers = msg.get("workers") or []
            if not isinstance(workers, list) or not all(isinstance(w, str) and UID.fullmatch(w) for w in workers):
                raise ValueError(f"workers must be a list of uids, got {shown(workers)}")
            num_worker = int(msg["num_worker"])
            groups = msg.get("groups") or []
            if groups and not _valid_groups(groups, num_worker):
                raise ValueError(
                    f"groups must give each of the {num_worker} worker ranks a group number, the groups "
                    f"numbered by their lowest rank, got {shown(groups)}"
                )
            return cls(int(msg["rank"]), int(msg["num_server"]), num_worker, servers, tuple(workers), tuple(groups))
        except (TypeError, ValueError) as exc:
            raise WireError(f"bad {Op.WELCOME} from the scheduler: {exc}") from None

    def host_groups(self) -> tuple[tuple[int, ...], ...]:
        """The workers by host group, the groups in order: the order every dist_sync sum is made in.

        A group is the workers with the same advertised host and the same machine id; the groups are
        ordered by their lowest rank, the ranks inside one in increasing order. A server's sum of a round is
        the sum over the groups, in this order, of the sum over each group's ranks, in this order.
        """
        groups = self.groups or tuple(range(self.num_worker))
        return tuple(tuple(r for r, g in enumerate(groups) if g == i) for i in range(max(groups, default=-1) + 1))

    def my_group(self) -> tuple[int, ...]:
        """To a worker: the ranks of its own host group (itself first when alone)."""
        return next((g for g in self.host_groups() if self.rank in g), (self.rank,))

    def to_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "rank": self.rank,
            "num_server": self.num_server,
            "num_worker": self.num_worker,
            "servers": [[s.rank, s.host, s.port, s.machine] for s in self.servers],
        }
        if self.workers:
            fields["workers"] = list(self.workers)
        if self.groups:
            fields["groups"] = list(self.groups)
        return fields

    def worker_identities(self) -> dict[bytes, int]:
        """To a server: each worker's socket identity towards it, and that worker's rank."""
        return {data_identity(uid, self.rank): rank for rank, uid in enumerate(self.workers)}


def group_numbers(places: list[tuple[str, str]]) -> tuple[int, ...]:
    """Each worker's host group, from (host, machine id) by rank: equal pairs share a group (a worker with no
    machine id is alone); groups are numbered by their lowest rank. The groups fix the order of every sum, with
    or without per-host aggregation."""
    numbers: dict[tuple[str, str] | int, int] = {}
    out = []
    for rank, (host, machine) in enumerate(places):
        place: tuple[str, str] | int = (host, machine) if machine else rank
        out.append(numbers.setdefault(place, len(numbers)))
    return tuple(out)


def _valid_groups(groups: object, num_worker: int) -> bool:
    if not isinstance(groups, list) or len(groups) != num_worker:
        return False
    top = -1
    for g in groups:
        if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g <= top + 1:
            return False
        top = max(top, g)
    return True


class NodeLink:
    """Owns the process's zmq context, the control socket and the heartbeat thread."""

    def __init__(self, cfg: PSConfig, role: str, log: Log, on_abort: Callable[[str], None] = exit_process) -> None:
        self.cfg = cfg
        self.role = role
        self.log = log
        self.uid = f"{role}-{cfg.node_host}-{os.getpid()}-{secrets.token_hex(4)}"
        if cfg.insecure:
            log.error(insecure_warning(cfg.root_uri, cfg.root_port))
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
        fields = Registration(self.role, cfg.node_host, port, cfg.rank, machine_id()).to_fields()
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
        if msg.op == INVALID_OP:
            self.log.error(f"dropped a message from the {self.scheduler}: {msg.get('reason')}")
            return
        self.log.info(f"ignoring unexpected {msg.op} from the scheduler")
