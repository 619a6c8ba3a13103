"""Per-host aggregation (the ``_device`` kvstore modes): the workers of one host push once, together.

A host group is the workers with the same advertised host and machine id (the scheduler's WELCOME
numbers them, :meth:`clipflow.ps.node.Welcome.host_groups`). Its lowest rank, the leader, binds a
ZeroMQ ipc socket the others connect to, and for every key makes one shared-memory region
(:class:`clipflow.ps.shm.Region`) of one slot per worker of the group: slot 0 holds the pulled
value, slot ``i`` the push of the group's ``i``-th worker.

* push: a member writes its value into its slot and tells the leader (``group_ready``, with the
  key and the push's number); the leader waits for every member, sums the values in rank order
  (its own first), frees the slots (``group_taken``) and sends one push for the group, which names
  the ranks it stands for. A member writes its slot again only after ``group_taken``.
* pull (of a key pushed since its last pull): the leader pulls from the servers, writes the value
  into slot 0 and tells the members (``group_pulled``), who copy it from there. Other pulls go to
  the servers from every worker as before.

So one copy per host crosses the network each way, and the group's sum is made in the order a
server makes it from single pushes: the results are bit-identical. The workers of a group must
make the same calls on a key (as every training loop does). Every wait polls the job's abort:
a worker that dies ends the job through the scheduler's heartbeat check, which names it.
"""

from __future__ import annotations

import hashlib
import tempfile
import time

import numpy as np
import torch
import zmq

from clipflow.errors import ClipflowError, CommError
from clipflow.ps.env import PSConfig
from clipflow.ps.log import Log
from clipflow.ps.node import NodeLink, Welcome
from clipflow.ps.shm import Region
from clipflow.ps.transport import Channel, make_socket
from clipflow.ps.wire import Message, WireError

POLL_S = 0.1
HELLO, ATTACH, ATTACHED, READY, TAKEN, PULLED = (
    "group_hello",
    "group_attach",
    "group_attached",
    "group_ready",
    "group_taken",
    "group_pulled",
)


def endpoint(cfg: PSConfig, leader: int) -> str:
    """The leader's ipc address: one per job (scheduler address), host and group."""
    tag = hashlib.sha256(f"{cfg.root_uri}:{cfg.root_port}:{cfg.node_host}:{leader}".encode()).hexdigest()[:20]
    return f"ipc://{tempfile.gettempdir()}/clipflow-group-{tag}"


class HostGroup:
    """One worker's part in its host group's aggregation; used from the KVStore's thread."""

    def __init__(self, cfg: PSConfig, link: NodeLink, welcome: Welcome, log: Log) -> None:
        self.ranks = welcome.my_group()
        self.rank = welcome.rank
        self.leader = self.ranks[0]
        self.is_leader = self.rank == self.leader
        self.position = self.ranks.index(self.rank)
        self._link = link
        self._log = log
        self._regions: dict[int, Region] = {}
        self._pushes: dict[int, int] = {}  # key -> pushes made (the round number of the next message)
        self._unshared: set[int] = set()  # keys pushed since their last pull: that pull goes through the group
        self._unfreed: dict[int, int] = {}  # a member's key -> the push whose slot the leader has not freed yet
        self._inbox: dict[tuple[str, int, int, int], Message] = {}  # (op, rank, key, round) -> message
        self._address = endpoint(cfg, self.leader)
        if self.is_leader:
            sock = make_socket(link.ctx, zmq.ROUTER)
            sock.bind(self._address)
        else:
            sock = make_socket(link.ctx, zmq.DEALER, f"m{self.rank}".encode())
            sock.connect(self._address)
        self._channel = Channel(sock, log, "host group")
        self._hello(cfg.startup_timeout)

    @property
    def members(self) -> tuple[int, ...]:
        return self.ranks[1:]

    def _hello(self, timeout_s: float) -> None:
        """Both sides make sure the other aggregates too, within the startup timeout."""
        deadline = time.monotonic() + timeout_s
        if self.is_leader:
            for r in self.members:
                self._wait(HELLO, r, -1, -1, deadline)
                self._send(Message(HELLO, {"rank": self.rank, "key": -1, "round": -1}), r)
        else:
            self._send(Message(HELLO, {"rank": self.rank, "key": -1, "round": -1}))
            self._wait(HELLO, self.leader, -1, -1, deadline)

    def attach(self, keys: list[tuple[int, int]]) -> None:
        """Share a region for each (key, numel) of ``keys`` (collective over the group, after init)."""
        if self.is_leader:
            made = []
            try:
                for key, numel in keys:
                    region = Region.create(f"group{self.leader}-k{key}", numel * len(self.ranks))
                    made.append(region)
                    self._regions[key] = region
                    for r in self.members:
                        self._send(Message(ATTACH, {"rank": self.rank, "key": key, "round": -1, "name": region.name,
                                                    "numel": region.array.size}), r)  # fmt: skip
                for key, _ in keys:
                    for r in self.members:
                        self._wait(ATTACHED, r, key, -1)
            finally:
                for region in made:
                    region.unlink()
        else:
            for key, numel in keys:
                msg = self._wait(ATTACH, self.leader, key, -1)
                try:
                    self._regions[key] = Region.attach(msg.get("name"), numel * len(self.ranks))
                except WireError as exc:
                    why = f"worker {self.rank} cannot map its host group's memory of key {key}: {exc}"
                    raise CommError(why) from None
                self._send(Message(ATTACHED, {"rank": self.rank, "key": key, "round": -1}))

    def shares(self, key: int) -> bool:
        """Whether the next pull of ``key`` goes through the group (it was pushed since its last pull)."""
        return key in self._unshared

    def push(self, key: int, flat: torch.Tensor) -> torch.Tensor | None:
        """A member hands its value to the leader (None: nothing to send); the leader gets the group's sum."""
        region = self._regions[key]
        numel = flat.numel()
        n = self._pushes[key] = self._pushes.get(key, 0) + 1
        self._unshared.add(key)
        if not self.is_leader:
            if key in self._unfreed:
                self._wait(TAKEN, self.leader, key, self._unfreed.pop(key))
            np.copyto(self._slot(region, self.position, numel), flat.numpy())
            self._send(Message(READY, {"rank": self.rank, "key": key, "round": n}))
            self._unfreed[key] = n
            return None
        total = flat.clone()
        for r in self.members:  # in rank order, after the leader's own: the order a server sums single pushes in
            self._wait(READY, r, key, n)
            total += torch.from_numpy(self._slot(region, self.ranks.index(r), numel))
        for r in self.members:
            self._send(Message(TAKEN, {"rank": self.rank, "key": key, "round": n}), r)
        return total

    def share(self, key: int, value: np.ndarray) -> None:
        """The leader: hand the pulled ``value`` of ``key`` to the members."""
        self._unshared.discard(key)
        np.copyto(self._slot(self._regions[key], 0, value.size), value.reshape(-1))
        for r in self.members:
            self._send(Message(PULLED, {"rank": self.rank, "key": key, "round": self._pushes[key]}), r)

    def shared(self, key: int, numel: int) -> np.ndarray:
        """A member: the value of ``key`` the leader pulled (a view of slot 0, valid until the next push)."""
        self._unshared.discard(key)
        self._wait(PULLED, self.leader, key, self._pushes[key])
        return self._slot(self._regions[key], 0, numel)

    def close(self) -> None:
        self._channel.close()
        self._regions.clear()

    # -- internals ----------------------------------------------------------------------------------

    @staticmethod
    def _slot(region: Region, index: int, numel: int) -> np.ndarray:
        return region.array[index * numel : (index + 1) * numel]

    def _send(self, msg: Message, to: int | None = None) -> None:
        self._channel.send(msg, None if to is None else f"m{to}".encode())

    def _wait(self, op: str, rank: int, key: int, round_: int, deadline: float | None = None) -> Message:
        """The message ``op`` from ``rank`` about ``key``'s push ``round_``; others met meanwhile are kept.

        Unbounded but for ``deadline`` (ClipflowError); a job abort (a dead worker) ends it."""
        want = (op, rank, key, round_)
        while want not in self._inbox:
            self._link.check_abort()
            if deadline is not None and time.monotonic() > deadline:
                other = f"worker {rank}" if rank != self.rank else "the others"
                raise ClipflowError(
                    f"worker {self.rank}: no answer from {other} of its host group {list(self.ranks)} within the "
                    "startup timeout (CLIPFLOW_STARTUP_TIMEOUT): every worker of a host must use the same kvstore "
                    "mode (train.kvstore) and CLIPFLOW_PS_SHM"
                )
            got = self._channel.recv(POLL_S)
            if got is None:
                continue
            peer, msg = got
            fields = (msg.get("rank"), msg.get("key"), msg.get("round"))
            sender_ok = peer is None or peer == f"m{fields[0]}".encode()  # a member speaks for itself only
            if not sender_ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in fields):
                self._log.error(f"dropped a bad {msg.op} in the host group: {msg.describe()}")
                continue
            self._inbox[(msg.op, *fields)] = msg
        return self._inbox.pop(want)
