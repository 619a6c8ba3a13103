"""A server's key-value state: stored arrays, per-key push rounds, and the update rule.

This module has no sockets: :meth:`KeyValueStore.handle` takes one request and
returns the replies to send (possibly to other workers, when a dist_sync round
completes), so it can be tested and reused directly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from clipflow.ps.compression import decompress
from clipflow.ps.optimizer import KeySet, Optimizer
from clipflow.ps.wire import Message, Op, WireError, shown


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


class OptimizerUpdater(Updater):
    """update_on_kvstore: the stored value is a weight, a finished round's merged gradient updates it.

    Runs the optimizer (:mod:`clipflow.ps.optimizer`), the code workers run when they update locally. Only
    keys in ``keys`` are updated; the others keep the default behaviour (the value becomes the sum).
    """

    def __init__(self, optimizer: Optimizer, keys: KeySet) -> None:
        self.optimizer = optimizer
        self.keys = keys

    def __call__(
        self, key: int, merged: np.ndarray, stored: np.ndarray, lr: float | None = None, state: Hashable = None
    ) -> np.ndarray:
        """``state`` names the momentum buffer (a split key has one per piece; default: the key)."""
        weight = stored.copy()  # replies may still be sending ``stored``
        self.optimizer.update(key, weight, merged, lr, state=state)
        return weight


class _Sum:
    """A sum made in a fixed order; the first term is kept as it came (a frame, or a worker's shared memory,
    which nobody writes before the round is answered) until a second one makes a new array."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None
        self.owned = False
        self.terms = 0

    def add(self, value: np.ndarray, owned: bool = False) -> None:
        if self.array is None:
            self.array, self.owned = value, owned
        elif not self.owned:
            self.array, self.owned = np.add(self.array, value), True
        else:
            self.array += value
        self.terms += 1

    def result(self) -> np.ndarray:
        """The sum, in an array of its own (a lone term is copied: its sender may reuse its buffer)."""
        assert self.array is not None
        return self.array if self.owned else np.array(self.array, copy=True)


@dataclass
class _Round:
    """Pushes to one key in the current dist_sync round, folded in the canonical order as they allow.

    ``singles`` holds a worker's own push until the ranks before it in its group came; ``groups`` the sums of
    the groups begun (by their number); ``whole`` a finished group's sum until the groups before it are in.
    """

    covered: set[int] = field(default_factory=set)
    singles: dict[int, np.ndarray] = field(default_factory=dict)
    groups: dict[int, _Sum] = field(default_factory=dict)
    whole: dict[int, _Sum] = field(default_factory=dict)
    total: _Sum = field(default_factory=_Sum)
    next_group: int = 0
    lrs: dict[int, Any] = field(default_factory=dict)  # lowest rank of a push -> the learning rate it carried
    waiting: list[tuple[bytes, Message]] = field(default_factory=list)


Reply = tuple[bytes, Message]


class Slot(NamedTuple):
    """What a server stores one value for: a key, or the piece of a split key that starts at ``start``."""

    key: int
    start: int = 0

    def __str__(self) -> str:
        return str(self.key) if self.start == 0 else f"{self.key} (from element {self.start})"

    def fields(self) -> dict[str, int]:
        return {"key": self.key, "start": self.start}


class KeyValueStore:
    """Float32 1-D values by :class:`Slot`; sums pushes, one round per slot at a time in dist_sync.

    Each operation has its own handler, found by the request's ``op`` in one table; a handler refuses a
    request by raising WireError, which :meth:`handle` turns into the ERROR reply.
    """

    def __init__(
        self,
        server_rank: int,
        num_worker: int,
        updater: Updater | None = None,
        groups: tuple[tuple[int, ...], ...] | None = None,
    ) -> None:
        self.server_rank = server_rank
        self.num_worker = num_worker
        # the workers' host groups (clipflow.ps.node.Welcome.host_groups): the order every round is summed in
        self.groups = groups or tuple((r,) for r in range(num_worker))
        self.group_of = {r: g for g, ranks in enumerate(self.groups) for r in ranks}
        if sorted(self.group_of) != list(range(num_worker)):
            raise ValueError(f"host groups {self.groups} do not cover the {num_worker} workers once each")
        self.pushes: dict[int, int] = {}  # sending rank -> pushes (and pushpulls) received, for STATS
        self.updater = updater or Updater()
        self.values: dict[Slot, np.ndarray] = {}
        self.rounds: dict[Slot, _Round] = {}
        self.optimizer: OptimizerUpdater | None = None
        self._handlers: dict[str, Callable[[bytes, Message], list[Reply]]] = {
            Op.STATS: self._stats,
            Op.INIT: self._init,
            Op.PULL: self._pull,
            Op.PUSH: self._push,
            Op.PUSHPULL: self._push,
            Op.SET_OPTIMIZER: self._set_optimizer,
            Op.SET_MULT: self._set_mult,
            Op.GET_STATES: self._get_states,
            Op.SET_STATES: self._set_states,
        }

    def handle(self, peer: bytes, msg: Message) -> list[Reply]:
        """Apply one request from ``peer``; return (peer, reply) pairs to send now."""
        try:
            handler = self._handlers.get(msg.op)
            if handler is None:  # an unknown op, or a message the transport could not decode (its reason says why)
                raise WireError(msg.get("reason") or f"unknown operation {msg.op!r}")
            return handler(peer, msg)
        except WireError as exc:
            return [(peer, self.error(msg, exc))]

    def error(self, msg: Message, exc: WireError) -> Message:
        """The ERROR reply to a request this server refuses."""
        return Message(Op.ERROR, {"seq": msg.get("seq"), "reason": f"server {self.server_rank}: {exc}"})

    # -- the handlers, one per operation --------------------------------------------------------

    def _stats(self, peer: bytes, msg: Message) -> list[Reply]:
        """The elements held per key (a split key's pieces added up), and the pushes received per sending rank."""
        keys: dict[str, int] = {}
        for slot, v in self.values.items():
            keys[str(slot.key)] = keys.get(str(slot.key), 0) + int(v.size)
        pushes = {str(r): n for r, n in sorted(self.pushes.items())}
        fields = {"seq": msg.get("seq"), "rank": self.server_rank, "keys": keys, "pushes": pushes}
        return [(peer, Message(Op.STATS, fields))]

    def _init(self, peer: bytes, msg: Message) -> list[Reply]:
        """Store the value unless the slot has one already (the first init wins) or ``overwrite`` is set."""
        key = self._key(msg)
        value = self._array(key, msg)
        if key not in self.values or msg.get("overwrite"):
            if key in self.rounds:
                raise WireError(f"cannot overwrite key {key} while a push round is in progress")
            self.values[key] = np.array(value, dtype=np.float32, copy=True)
        return [(peer, _ok(msg, **key.fields()))]

    def _pull(self, peer: bytes, msg: Message) -> list[Reply]:
        return [(peer, self._value(self._key(msg), msg))]

    def _push(self, peer: bytes, msg: Message) -> list[Reply]:
        """PUSH and PUSHPULL: dist_async applies it at once; dist_sync adds it to the slot's round and answers
        every push of the round once every worker rank is covered.

        A push stands for its sender's rank, or (``ranks``, per-host aggregation) for the whole host group
        the sender leads, whose sum it carries. The round's sum is made in the canonical order whatever the
        order of arrival: over the groups in order, the sum of each group's ranks in order."""
        key = self._key(msg)
        stored = self._stored(key, msg)
        value = self._gradient(key, msg, stored.size)
        rank = msg.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.num_worker:
            raise WireError(f"{msg.op} of key {key} from bad worker rank {rank!r}")
        ranks = self._ranks(key, rank, msg)
        self.pushes[rank] = self.pushes.get(rank, 0) + 1
        if not msg.get("sync", True):
            self.values[key] = self._update(key, np.array(value, copy=True), stored, msg.get("lr"))
            return [(peer, self._reply(key, msg))]
        round_ = self.rounds.setdefault(key, _Round())
        twice = round_.covered.intersection(ranks)
        if twice:
            raise WireError(f"worker {min(twice)} pushed key {key} twice in one round")
        round_.covered.update(ranks)
        if len(ranks) > 1:
            whole = round_.whole[self.group_of[rank]] = _Sum()
            whole.add(value)
        else:
            round_.singles[rank] = value
        round_.lrs[rank] = msg.get("lr")
        round_.waiting.append((peer, Message(msg.op, dict(msg.fields))))  # drop the frame: the round has it
        self._fold(round_)
        if len(round_.covered) < self.num_worker:
            return []
        del self.rounds[key]
        # every worker should carry the same schedule; the lowest rank's learning rate is the round's
        self.values[key] = self._update(key, round_.total.result(), stored, round_.lrs[min(round_.lrs)])
        return [(p, self._reply(key, m)) for p, m in round_.waiting]

    def _ranks(self, key: Slot, rank: int, msg: Message) -> tuple[int, ...]:
        """The ranks a push stands for: its sender's, or the whole host group it leads (``ranks``)."""
        ranks = msg.get("ranks")
        if ranks is None:
            return (rank,)
        group = self.groups[self.group_of[rank]]
        if ranks != list(group) or rank != group[0]:
            raise WireError(
                f"{msg.op} of key {key} from worker {rank} stands for ranks {shown(ranks)}; a host group's "
                f"push comes from its lowest rank and names its ranks {list(group)}"
            )
        return group

    def _fold(self, round_: _Round) -> None:
        """Add what arrived in the canonical order as far as it goes, keeping as few arrays as possible."""
        for g in sorted({self.group_of[r] for r in round_.singles}):
            members = self.groups[g]
            acc = round_.groups.setdefault(g, _Sum())
            while acc.terms < len(members) and members[acc.terms] in round_.singles:
                acc.add(round_.singles.pop(members[acc.terms]))
            if acc.terms == len(members):
                round_.whole[g] = round_.groups.pop(g)
        while round_.next_group in round_.whole:
            done = round_.whole.pop(round_.next_group)
            assert done.array is not None
            round_.total.add(done.array, owned=done.owned)
            round_.next_group += 1

    def _set_optimizer(self, peer: bytes, msg: Message) -> list[Reply]:
        """Run an optimizer on pushes to the keys given; a new configuration keeps the states and multipliers."""
        try:
            optimizer = Optimizer.from_config(msg["optimizer"])
            keys = KeySet.from_wire(msg.get("keys"))
        except (TypeError, ValueError) as exc:
            raise WireError(f"bad optimizer: {exc}") from None
        if self.optimizer is None:
            self.optimizer = OptimizerUpdater(optimizer, keys)
        else:
            try:
                self.optimizer.optimizer.reconfigure(optimizer)
            except ValueError as exc:
                raise WireError(str(exc)) from None
            self.optimizer.keys = keys
        return [(peer, _ok(msg))]

    def _set_mult(self, peer: bytes, msg: Message) -> list[Reply]:
        """Per-key weight decay (``wd_mult``) and learning rate (``lr_mult``) multipliers."""
        opt = self._optimizer(msg)
        try:
            opt.set_wd_mult({int(k): v for k, v in (msg.get("wd_mult") or {}).items()})
            opt.set_lr_mult({int(k): v for k, v in (msg.get("lr_mult") or {}).items()})
        except (AttributeError, TypeError, ValueError) as exc:
            raise WireError(f"bad multipliers: {exc}") from None
        return [(peer, _ok(msg))]

    def _get_states(self, peer: bytes, msg: Message) -> list[Reply]:
        """The optimizer's states: ``keys`` lists [key, start] pairs (a split key has a buffer per piece),
        one array each."""
        states = self._optimizer(msg).get_states()
        slots = sorted(states)
        reply = Message(Op.OK, {"seq": msg.get("seq"), "keys": [list(k) for k in slots]}, [states[k] for k in slots])
        return [(peer, reply)]

    def _set_states(self, peer: bytes, msg: Message) -> list[Reply]:
        """Replace the optimizer's states of the [key, start] pairs in ``keys`` with the arrays, one each."""
        opt = self._optimizer(msg)
        keys = msg.get("keys")
        try:
            slots = [Slot(*pair) for pair in keys]  # type: ignore[union-attr]
            if not all(isinstance(v, int) and not isinstance(v, bool) for slot in slots for v in slot):
                raise TypeError
        except TypeError:
            slots = []
        if len(slots) != len(msg.arrays) or not slots and keys != []:
            raise WireError(
                f"{msg.op} needs one array per [key, start] pair, got {keys!r} and {len(msg.arrays)} arrays"
            )
        for slot, arr in zip(slots, msg.arrays, strict=True):
            size = opt.state_size(self._stored(slot, msg).size)
            if arr.dtype != np.float32 or arr.size != size:
                raise WireError(
                    f"{msg.op}: the {opt.name} state of key {slot} holds {size} elements here, "
                    f"got {arr.dtype} {arr.shape}"
                )
        opt.set_states(dict(zip(slots, msg.arrays, strict=True)))
        return [(peer, _ok(msg))]

    # -- what the handlers share ------------------------------------------------------------------

    def _key(self, msg: Message) -> Slot:
        key, start = msg.get("key"), msg.get("start", 0)
        if not isinstance(key, int) or isinstance(key, bool):
            raise WireError(f"{msg.op} needs an integer key, got {key!r}")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise WireError(f"{msg.op} of key {key} needs a start >= 0, got {start!r}")
        return Slot(key, start)

    def _array(self, key: Slot, msg: Message) -> np.ndarray:
        if len(msg.arrays) != 1 or msg.arrays[0].dtype != np.float32:
            raise WireError(f"{msg.op} of key {key} needs exactly one float32 array")
        return msg.arrays[0].reshape(-1)

    def _stored(self, key: Slot, msg: Message) -> np.ndarray:
        stored = self.values.get(key)
        if stored is None:
            raise WireError(
                f"{msg.op}: key {key} is not initialised on this server "
                "(call init first; every worker must init the same keys in the same order)"
            )
        return stored

    def _optimizer(self, msg: Message) -> Optimizer:
        if self.optimizer is None:
            raise WireError(f"{msg.op} before set_optimizer")
        return self.optimizer.optimizer

    def _value(self, key: Slot, msg: Message) -> Message:
        return Message(Op.VALUE, {"seq": msg.get("seq"), **key.fields()}, [self._stored(key, msg)])

    def _gradient(self, key: Slot, msg: Message, size: int) -> np.ndarray:
        """The pushed float32 values (dequantized if the push is compressed); may be a read-only view."""
        if msg.get("compression") is None:
            value = self._array(key, msg)
            if value.size != size:
                raise WireError(f"{msg.op} of key {key} has {value.size} elements, the stored value {size}")
            return value
        if len(msg.arrays) != 1:
            raise WireError(f"compressed {msg.op} of key {key} needs exactly one array")
        try:
            return decompress(msg.fields, msg.arrays[0], size)
        except ValueError as exc:
            raise WireError(f"{msg.op} of key {key}: {exc}") from None

    def _update(self, slot: Slot, merged: np.ndarray, stored: np.ndarray, lr: Any) -> np.ndarray:
        key = slot.key
        if self.optimizer is not None and key in self.optimizer.keys:
            if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float)):
                raise WireError(f"push of key {key} carries a bad learning rate {lr!r}")
            try:
                return self.optimizer(key, merged, stored, lr, state=slot)
            except ValueError as exc:
                raise WireError(str(exc)) from None
        return self.updater(key, merged, stored)

    def _reply(self, key: Slot, msg: Message) -> Message:
        if msg.op == Op.PUSHPULL:
            return self._value(key, msg)
        return _ok(msg, **key.fields())


def _ok(msg: Message, **fields: object) -> Message:
    """The OK reply to ``msg`` (its seq, and ``fields``)."""
    return Message(Op.OK, {"seq": msg.get("seq"), **fields})
