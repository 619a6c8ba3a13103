"""The scheduler: registers nodes, hands out ranks, runs barriers, watches heartbeats.

Message flow: every server and worker sends REGISTER; once all DMLC_NUM_SERVER
servers and DMLC_NUM_WORKER workers are in, each gets WELCOME (rank, counts,
server table). Workers send BARRIER and get BARRIER_DONE when their whole group
arrived. Every node's heartbeat thread sends HEARTBEAT, answered at once. A node
silent past the heartbeat timeout, a FAIL from a node, or an incomplete startup
past the startup timeout makes the scheduler send ABORT (with the reason) to
every node and exit 1. When every worker sent DONE, servers get SHUTDOWN and the
scheduler exits 0.

With CURVE security (:mod:`clipflow.ps.security`) the ROUTER is a CURVE server and a
ZAP authenticator admits only the client keys of CLIPFLOW_PS_KEYS: a node with other
keys never gets a message through, so it cannot register (nor disturb the job). With
PS_RESEND=1 nodes repeat REGISTER and BARRIER until answered: a repeated REGISTER after
the welcome gets the welcome again, a repeated BARRIER of a released barrier gets its
BARRIER_DONE again (it never opens a new barrier).

Members and strangers. A member is a registered node, known by its two socket identities
(``<uid>/c``, ``<uid>/h``); the uid a message carries must be its socket's. Only a member's
failure ends the job: a malformed message, a REGISTER that is not one a node sends (an unknown
role, a bad port...), or any other message from a socket that is no member's (a forged FAIL or
DONE) is dropped and logged with the sender's address (:meth:`Channel.reject`). A well-formed
REGISTER that conflicts with the others (a rank asked twice, one node too many) is a
misconfigured job while it starts, and ends it as before; once the job runs, the newcomer is
refused (told with ABORT) and the job goes on. A ps-lite node's first message (an MXNet script started
without `clipflow launch --mxnet`: :func:`clipflow.ps.foreign.ps_lite_join` tells it exactly) ends the job
while it starts, named with its address, and is dropped once it runs; any other garbage (random bytes, a frame
that is not JSON, JSON nested too deeply) is dropped and logged, starting or running
(:meth:`Channel.reject_malformed`). Without security, any local process can still
register during startup as one of the nodes: that is what CURVE is for.
"""

from __future__ import annotations

import time

import zmq

from clipflow.errors import ABORTED
from clipflow.ps.env import PSConfig
from clipflow.ps.log import Log, print_abort
from clipflow.ps.node import Registration, ServerAddress, Welcome, ctrl_identity, group_numbers, hb_identity, member_uid
from clipflow.ps.registry import Node, Registry, RegistryError
from clipflow.ps.security import insecure_warning, keys_for, start_authenticator, stop_authenticator
from clipflow.ps.signals import Terminated, sigterm_raises
from clipflow.ps.transport import INVALID_OP, Channel, ForeignPeer, bind, make_context, make_socket
from clipflow.ps.wire import Message, Op, WireError, shown

POLL_S = 0.05
FLUSH_S = 1.0  # how long queued ABORT/SHUTDOWN messages get to leave before the socket closes


class _Abort(Exception):
    """Internal: the job must be torn down for ``reason``; ``also`` is a rejected node's uid to tell too."""

    def __init__(self, reason: str, also: str | None = None) -> None:
        super().__init__(reason)
        self.also = also


def run_scheduler(cfg: PSConfig) -> int:
    """Run the scheduler until all workers are done (0) or the job is aborted (1)."""
    log = Log("scheduler", cfg.verbose)
    if cfg.insecure:
        log.error(insecure_warning(cfg.root_uri, cfg.root_port))
    keys = keys_for(cfg.security, cfg.keys_dir)
    ctx = make_context()
    auth = start_authenticator(ctx, keys)
    sock = make_socket(ctx, zmq.ROUTER, keys=keys)
    channel = Channel(sock, log, "router")
    try:
        bind(sock, cfg.root_uri, cfg.root_port)
        log.info(f"listening on port {cfg.root_port} for {cfg.num_server} servers and {cfg.num_worker} workers")
        with sigterm_raises():
            return Scheduler(cfg, channel, log).run()
    finally:
        channel.close(FLUSH_S)
        stop_authenticator(auth)
        ctx.term()


class Scheduler:
    """The scheduler's event loop over one ROUTER socket."""

    def __init__(self, cfg: PSConfig, channel: Channel, log: Log) -> None:
        self.cfg = cfg
        self.channel = channel
        self.log = log
        self.registry = Registry(cfg.num_server, cfg.num_worker)
        self.barriers: dict[str, dict[str, int]] = {}  # group -> uid -> the seq its BARRIER carried
        self.released: dict[str, tuple[str, int]] = {}  # uid -> (group, seq) of its last released barrier

    def run(self) -> int:
        deadline = time.monotonic() + self.cfg.startup_timeout
        try:
            while True:
                got = self.channel.recv(POLL_S)
                now = time.monotonic()
                if got is not None:
                    peer, msg = got
                    assert peer is not None
                    if self._handle(peer, msg, now):
                        self.channel.drops.summary()
                        return 0
                self._check_liveness(now, deadline)
        except (_Abort, ForeignPeer, Terminated, KeyboardInterrupt) as exc:
            also = exc.also if isinstance(exc, _Abort) else None
            reason = str(exc) if isinstance(exc, (_Abort, ForeignPeer)) else f"the {self.name} was {_how(exc)}"
            uids = [node.uid for node in self.registry.nodes()] + ([also] if also else [])
            for uid in uids:
                self.channel.try_send(Message(Op.ABORT, {"reason": reason}), hb_identity(uid))
            print_abort(reason)
            return ForeignPeer.exit_status if isinstance(exc, ForeignPeer) else ABORTED  # the cause, not an echo

    @property
    def name(self) -> str:
        return f"scheduler at {self.cfg.root_uri}:{self.cfg.root_port}"

    def _check_liveness(self, now: float, deadline: float) -> None:
        stale = self.registry.stale(now, self.cfg.heartbeat_timeout)
        if stale is not None:
            raise _Abort(f"{stale.describe()} stopped answering (no heartbeat for {now - stale.last_seen:.1f} s)")
        if not self.registry.ranked and now > deadline:
            counts = self.registry.counts()
            raise _Abort(
                f"startup timed out after {self.cfg.startup_timeout:g} s (CLIPFLOW_STARTUP_TIMEOUT): "
                f"{counts['server']} of {self.cfg.num_server} servers and {counts['worker']} of "
                f"{self.cfg.num_worker} workers registered; check that every node was started with "
                f"DMLC_PS_ROOT_URI={self.cfg.root_uri} DMLC_PS_ROOT_PORT={self.cfg.root_port}"
            )

    def _handle(self, peer: bytes, msg: Message, now: float) -> bool:
        """Process one message; True when the job finished cleanly."""
        uid = member_uid(peer)
        node = self.registry.get(uid)
        if node is not None:
            node.last_seen = now
        if msg.op == INVALID_OP:
            self._malformed(peer, node, msg)
        elif msg.get("uid", uid) != uid:
            self.channel.reject(peer, msg, f"it carries uid {shown(msg.get('uid'))}, not its socket's")
        elif msg.op == Op.HEARTBEAT:
            self.channel.try_send(Message(Op.HEARTBEAT_ACK), peer)
        elif msg.op == Op.REGISTER:
            self._register(peer, uid, msg, now)
        elif node is None:
            self.channel.reject(peer, msg, "the sender is not a member of this job")
        else:
            return self._from_member(node, msg)
        return False

    def _from_member(self, node: Node, msg: Message) -> bool:
        """A registered node's message other than HEARTBEAT and REGISTER; True when the job finished."""
        if msg.op == Op.BARRIER:
            self._barrier(node, msg)
        elif msg.op == Op.DONE:
            node.done = True
            self.log.info(f"{node.describe()} is done")
            self._release_barriers()
            if self.registry.workers_done:
                self._shutdown()
                return True
        elif msg.op == Op.FAIL:
            raise _Abort(f"{node.describe()} failed: {msg.get('reason', 'no reason given')}")
        else:
            self.log.info(f"ignoring unexpected {msg.op} from {node.describe()}")
        return False

    def _malformed(self, peer: bytes, node: Node | None, msg: Message) -> None:
        if node is None:  # while the job starts, a ps-lite node's first message ends it (MXNet's launch.py's script)
            self.channel.reject_malformed(peer, msg, starting=not self.registry.ranked)
        else:
            self.log.error(f"{node.describe()} sent a {msg.get('reason')}")

    def _register(self, peer: bytes, uid: str | None, msg: Message, now: float) -> None:
        if uid is None or peer != ctrl_identity(uid):
            self.channel.reject(peer, msg, "a register must come from a node's control socket (<uid>/c)")
            return
        try:
            reg = Registration.from_message(msg)
        except WireError as exc:
            self.channel.reject(peer, msg, str(exc))
            return
        try:
            node = self.registry.add(uid, reg.role, reg.host, reg.port, reg.rank, now, machine=reg.machine)
        except RegistryError as exc:
            if not self.registry.ranked:  # the job's own nodes disagree while it starts: a misconfigured job
                raise _Abort(str(exc), also=uid) from None
            self.channel.reject(peer, msg, f"{exc}; the job goes on without it")
            refusal = Message(Op.ABORT, {"reason": f"the {self.name} refused this node: {exc}"})
            self.channel.try_send(refusal, hb_identity(uid))
            return
        counts = self.registry.counts()
        self.log.info(
            f"registered {reg.role} on {reg.host} ({counts['server']}/{self.cfg.num_server} servers, "
            f"{counts['worker']}/{self.cfg.num_worker} workers)"
        )
        if self.registry.complete and not self.registry.ranked:
            self._welcome()
        elif self.registry.ranked:  # a repeated REGISTER (PS_RESEND=1): its WELCOME was lost
            self._welcome_one(node)

    def _server_table(self) -> tuple[ServerAddress, ...]:
        return tuple(ServerAddress(n.rank or 0, n.host, n.port or 0, n.machine) for n in self.registry.servers())

    def _welcome(self) -> None:
        self.registry.assign_ranks()
        for node in self.registry.nodes():
            self._welcome_one(node)

    def _welcome_one(self, node: Node) -> None:
        """WELCOME to ``node``, with every worker's host group; a server's also lists the workers, the only peers it
        serves."""
        workers = sorted(self.registry.nodes("worker"), key=lambda n: n.rank or 0)
        uids = tuple(n.uid for n in workers) if node.role == "server" else ()
        groups = group_numbers([(n.host, n.machine) for n in workers])
        welcome = Welcome(node.rank or 0, self.cfg.num_server, self.cfg.num_worker, self._server_table(), uids, groups)
        self.channel.try_send(Message(Op.WELCOME, welcome.to_fields()), ctrl_identity(node.uid))
        self.log.info(f"welcomed {node.describe()}")

    def _barrier(self, node: Node, msg: Message) -> None:
        group = str(msg.get("group", "worker"))
        try:
            self.registry.group(group)
        except RegistryError as exc:
            raise _Abort(f"{node.describe()}: {exc}") from None
        seq = msg.get("seq", 0)
        if not isinstance(seq, int) or isinstance(seq, bool):  # out of protocol: end the job naming the node
            raise _Abort(f"{node.describe()} sent a {Op.BARRIER} with a bad seq {seq!r}")
        if self.released.get(node.uid) == (group, seq):  # a repeat (PS_RESEND=1) whose answer was lost
            self.channel.try_send(Message(Op.BARRIER_DONE, {"group": group, "seq": seq}), ctrl_identity(node.uid))
            return
        self.barriers.setdefault(group, {})[node.uid] = seq
        self._release_barriers()

    def _release_barriers(self) -> None:
        """Answer every barrier whose live members have all arrived."""
        for group, arrived in list(self.barriers.items()):
            members = self.registry.group(group)
            if members and all(n.uid in arrived for n in members):
                for n in members:
                    reply = Message(Op.BARRIER_DONE, {"group": group, "seq": arrived[n.uid]})
                    self.released[n.uid] = (group, arrived[n.uid])
                    self.channel.try_send(reply, ctrl_identity(n.uid))
                del self.barriers[group]

    def _shutdown(self) -> None:
        for node in self.registry.nodes("server"):
            self.channel.try_send(Message(Op.SHUTDOWN), ctrl_identity(node.uid))
        self.log.info("all workers are done; servers told to shut down")


def _how(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (SIGINT)"
