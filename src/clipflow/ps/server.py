"""A parameter server process: a ROUTER on a free port serving one KeyValueStore.

Every request passes :class:`clipflow.ps.reliable.Dedup` first, so a repeated
request (PS_RESEND=1) is never applied twice; every reply is recorded there. With
CURVE security the ROUTER is a CURVE server whose clients the link's ZAP
authenticator checks. CLIPFLOW_PS_DROP_PERCENT drops received requests on purpose.
Workers on the same machine may pass their arrays through shared memory
(:class:`clipflow.ps.shm.ServerRegions` rewrites those requests and replies).

The scheduler's WELCOME names the job's workers: a message from any other socket, and a
malformed one, is dropped and logged with its sender's address (:meth:`Channel.reject`),
never answered, never applied; but until every worker of the job was heard from, a ps-lite node's first
message (an MXNet worker's) ends the job naming it (:meth:`Channel.reject_malformed`).
"""

from __future__ import annotations

import signal

import zmq

from clipflow.errors import ABORTED
from clipflow.ps.env import PSConfig
from clipflow.ps.log import Log, print_abort
from clipflow.ps.node import NodeLink
from clipflow.ps.reliable import Dedup
from clipflow.ps.shm import ServerRegions
from clipflow.ps.signals import Terminated, sigterm_raises
from clipflow.ps.store import KeyValueStore, Reply, Updater
from clipflow.ps.transport import INVALID_OP, Channel, Dropper, ForeignPeer, bind_random, drop_seed, make_socket
from clipflow.ps.wire import Message, Op, WireError

POLL_MS = 100
BATCH = 256  # requests handled before looking at the control socket again


def run_server(cfg: PSConfig, updater: Updater | None = None) -> int:
    """Serve until the scheduler says SHUTDOWN (0) or aborts the job (1, or the process exits 1)."""
    log = Log("server", cfg.verbose)
    link = NodeLink(cfg, "server", log)
    data = Channel(make_socket(link.ctx, zmq.ROUTER, keys=link.keys), log, "data")
    try:
        with sigterm_raises():
            port = bind_random(data.sock, cfg.node_host)
            welcome = link.register(port)
            log.who = f"server {welcome.rank}"
            log.info(
                f"rank {welcome.rank} of {welcome.num_server}, serving {welcome.num_worker} workers on port {port}"
            )
            store = KeyValueStore(welcome.rank, welcome.num_worker, updater, welcome.host_groups())
            dedup = Dedup(f"server {welcome.rank}", cfg.resend)
            if cfg.drop_percent:
                data.dropper = Dropper(cfg.drop_percent, drop_seed(cfg.drop_seed, "server", welcome.rank))
            return _serve(link, Data(data, welcome.worker_identities(), store, dedup, log))
    except Terminated as exc:
        link.fail(str(exc))
        print_abort(f"{log.who} {exc}")
        return 128 + signal.SIGTERM
    except ForeignPeer as exc:  # the scheduler ends the others; this server is the cause
        link.fail(str(exc))
        print_abort(f"{log.who}: {exc}")
        return ForeignPeer.exit_status
    except BaseException as exc:
        link.fail(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        data.close()
        link.close()


class Data:
    """A server's data port: the channel, the workers it serves (socket identity -> rank) and what it keeps."""

    def __init__(
        self, channel: Channel, workers: dict[bytes, int], store: KeyValueStore, dedup: Dedup, log: Log
    ) -> None:
        self.channel = channel
        self.workers = workers
        self.store = store
        self.dedup = dedup
        self.log = log
        self.regions = ServerRegions()
        self.seen: set[bytes] = set()

    def serve_batch(self) -> None:
        """Handle the requests waiting (at most BATCH)."""
        for _ in range(BATCH):
            got = self.channel.recv_ready()
            if got is not None:
                peer, msg = got
                assert peer is not None
                if self._admit(peer, msg):
                    self._request(peer, msg)
            if not self.channel.sock.poll(0):
                break

    def _admit(self, peer: bytes, msg: Message) -> bool:
        """Whether ``msg`` is a request of one of the job's workers; else it is dropped and logged."""
        if msg.op == INVALID_OP:  # until each of its workers was heard, a ps-lite node's first message ends the job
            self.channel.reject_malformed(peer, msg, starting=len(self.seen) < len(self.workers))
            return False
        rank = self.workers.get(peer)
        if rank is None:
            self.channel.reject(peer, msg, "the sender is not a worker of this job")
            return False
        if peer not in self.seen:
            self.seen.add(peer)
            self.log.info(f"connection from worker {rank}")
        return True

    def _request(self, peer: bytes, msg: Message) -> None:
        fresh, answers = self.dedup.admit(peer, msg)
        for answer in answers:
            self.channel.try_send(answer, peer)
        if fresh:
            for to, reply in _handle(self.store, self.regions, peer, msg):
                self.dedup.answered(to, reply)
                self.channel.try_send(reply, to)


def _serve(link: NodeLink, data: Data) -> int:
    poller = zmq.Poller()
    poller.register(data.channel.sock, zmq.POLLIN)
    poller.register(link.ctrl.sock, zmq.POLLIN)
    log = data.log
    while True:
        link.check_abort()
        events = dict(poller.poll(POLL_MS))
        if data.channel.sock in events:
            data.serve_batch()
        if link.ctrl.sock in events:
            _, msg = link.ctrl.recv_ready()
            if msg.op == Op.SHUTDOWN:
                log.info("shutting down: all workers are done")
                stats = f"{data.dedup.duplicates} repeated requests answered without applying them again"
                if data.channel.dropper is not None:
                    log.error(f"fault injection dropped {data.channel.dropper.dropped} received messages; {stats}")
                else:
                    log.info(stats)
                data.channel.drops.summary()
                return 0
            if msg.op == Op.ABORT:
                print_abort(str(msg.get("reason", "the scheduler aborted the job")))
                return ABORTED
            if msg.op == INVALID_OP:
                log.error(f"dropped a message from the {link.scheduler}: {msg.get('reason')}")
                continue
            log.info(f"ignoring unexpected {msg.op} from the scheduler")


def _handle(store: KeyValueStore, regions: ServerRegions, peer: bytes, msg: Message) -> list[Reply]:
    """One new request: shared-memory set-up here, the rest by the store (arrays in and out via regions)."""
    try:
        if msg.op == Op.SHM_ATTACH:
            return [(peer, regions.attach(peer, msg))]
        msg = regions.inbound(peer, msg)
    except WireError as exc:
        return [(peer, store.error(msg, exc))]
    return [(to, regions.outbound(to, reply)) for to, reply in store.handle(peer, msg)]
