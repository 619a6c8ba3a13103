"""A server's key-value state: stored arrays, per-key push rounds, and the update rule.

This module has no sockets: :meth:`KeyValueStore.handle` takes one request and
returns the replies to send (possibly to other workers, when a dist_sync round
completes), so it can be tested and reused directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from clipflow.ps.wire import Message, Op, WireError


class Updater:
    """Turns a finished round's merged pushes into the key's new stored value.

    The default is MXNet's update_on_kvstore=False behaviour: servers only sum,
    workers run the optimizer, so the stored value becomes the merged sum. A
    server-side optimizer replaces this class. It must return a new array (or
    ``merged``) and never modify ``stored`` in place: replies may still be
    sending it.
    """

    def __call__(self, key: int, merged: np.ndarray, stored: np.ndarray) -> np.ndarray:
        return merged


@dataclass
class _Round:
    """Pushes to one key in the current dist_sync round."""

    merged: np.ndarray | None = None
    ranks: set[int] = field(default_factory=set)
    waiting: list[tuple[bytes, Message]] = field(default_factory=list)


Reply = tuple[bytes, Message]


class KeyValueStore:
    """Float32 1-D values keyed by int; sums pushes, one round per key at a time in dist_sync."""

    def __init__(self, server_rank: int, num_worker: int, updater: Updater | None = None) -> None:
        self.server_rank = server_rank
        self.num_worker = num_worker
        self.updater = updater or Updater()
        self.values: dict[int, np.ndarray] = {}
        self.rounds: dict[int, _Round] = {}

    def handle(self, peer: bytes, msg: Message) -> list[Reply]:
        """Apply one request from ``peer``; return (peer, reply) pairs to send now."""
        try:
            if msg.op == Op.STATS:
                keys = {str(k): int(v.size) for k, v in self.values.items()}
                return [(peer, Message(Op.STATS, {"seq": msg.get("seq"), "rank": self.server_rank, "keys": keys}))]
            key = self._key(msg)
            if msg.op == Op.INIT:
                return [(peer, self._init(key, msg))]
            if msg.op == Op.PULL:
                return [(peer, self._value(key, msg))]
            if msg.op in (Op.PUSH, Op.PUSHPULL):
                return self._push(key, peer, msg)
            raise WireError(msg.get("reason") or f"unknown operation {msg.op!r}")
        except WireError as exc:
            return [(peer, Message(Op.ERROR, {"seq": msg.get("seq"), "reason": f"server {self.server_rank}: {exc}"}))]

    def _key(self, msg: Message) -> int:
        key = msg.get("key")
        if not isinstance(key, int) or isinstance(key, bool):
            raise WireError(f"{msg.op} needs an integer key, got {key!r}")
        return key

    def _array(self, key: int, msg: Message) -> np.ndarray:
        if len(msg.arrays) != 1 or msg.arrays[0].dtype != np.float32:
            raise WireError(f"{msg.op} of key {key} needs exactly one float32 array")
        return msg.arrays[0].reshape(-1)

    def _stored(self, key: int, msg: Message) -> np.ndarray:
        stored = self.values.get(key)
        if stored is None:
            raise WireError(
                f"{msg.op}: key {key} is not initialised on this server "
                "(call init first; every worker must init the same keys in the same order)"
            )
        return stored

    def _init(self, key: int, msg: Message) -> Message:
        value = self._array(key, msg)
        if key not in self.values or msg.get("overwrite"):
            if key in self.rounds:
                raise WireError(f"cannot overwrite key {key} while a push round is in progress")
            self.values[key] = np.array(value, dtype=np.float32, copy=True)
        return Message(Op.OK, {"seq": msg.get("seq"), "key": key})

    def _value(self, key: int, msg: Message) -> Message:
        return Message(Op.VALUE, {"seq": msg.get("seq"), "key": key}, [self._stored(key, msg)])

    def _push(self, key: int, peer: bytes, msg: Message) -> list[Reply]:
        stored = self._stored(key, msg)
        value = self._array(key, msg)
        if value.size != stored.size:
            raise WireError(f"{msg.op} of key {key} has {value.size} elements, the stored value {stored.size}")
        rank = msg.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < self.num_worker:
            raise WireError(f"{msg.op} of key {key} from bad worker rank {rank!r}")
        if not msg.get("sync", True):
            self.values[key] = self.updater(key, value.copy(), stored)
            return [(peer, self._reply(key, msg))]
        round_ = self.rounds.setdefault(key, _Round())
        if rank in round_.ranks:
            raise WireError(f"worker {rank} pushed key {key} twice in one round")
        if round_.merged is None:
            round_.merged = value.copy()
        else:
            round_.merged += value
        round_.ranks.add(rank)
        round_.waiting.append((peer, Message(msg.op, dict(msg.fields))))  # drop the frame: merged has it
        if len(round_.ranks) < self.num_worker:
            return []
        del self.rounds[key]
        self.values[key] = self.updater(key, round_.merged, stored)
        return [(p, self._reply(key, m)) for p, m in round_.waiting]

    def _reply(self, key: int, msg: Message) -> Message:
        if msg.op == Op.PUSHPULL:
            return self._value(key, msg)
        return Message(Op.OK, {"seq": msg.get("seq"), "key": key})
