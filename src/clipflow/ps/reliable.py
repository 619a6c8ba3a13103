"""Lost-message handling on the data plane (worker <-> server): resend, duplicates, probes.

Settings (read by :mod:`clipflow.ps.env`):

``PS_RESEND`` = 0 | 1 (default 0), ``PS_RESEND_TIMEOUT`` = milliseconds (default 1000)
    With 1, a request not acknowledged within the timeout is sent again (at most
    :data:`RESEND_LIMIT` times). With 0, a request unanswered for that long is *probed*
    (a header-only message), and a lost request or reply ends the wait with an error
    naming PS_RESEND instead of hanging.
``CLIPFLOW_PS_DROP_PERCENT``, ``CLIPFLOW_PS_DROP_SEED``
    Fault injection: each worker and server drops that percentage of the data-plane
    messages it receives (:class:`clipflow.ps.transport.Dropper`).

Design. Every request of a worker carries ``seq`` (unique and increasing per worker)
and ``lo``, the lowest seq this worker still waits for from that server. The server
(:class:`Dedup`) remembers, per worker, the seqs >= ``lo`` it has received: *pending*
ones (a dist_sync round still waiting for other workers) and *answered* ones with
their reply (kept only with PS_RESEND=1). A request seen before is never applied
again: a duplicate of a pending one is acknowledged, a duplicate of an answered one
gets the same reply again, one below ``lo`` is stale and dropped. So a push is never
summed twice, and memory is bounded by what the worker has in flight (plus a hard cap
of :data:`MAX_TRACKED` per worker). With PS_RESEND=1 the server acknowledges (``ack``)
each new request at once, so the worker (:class:`Outbox`) resends the data only
while unacknowledged; once acknowledged it sends header-only probes, which cost
nothing while a dist_sync round waits for a slow worker and recover a lost reply.
The worker drops duplicate replies (a seq it no longer waits for).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from clipflow.ps.wire import Message, Op

PROBE = "probe"  # worker -> server: "what became of request seq?" (no arrays)
ACK = "ack"  # server -> worker: "I have request seq and am working on it"
RESEND_LIMIT = 30  # unacknowledged sends of one request before giving up
MAX_TRACKED = 65536  # answered seqs remembered per worker, whatever ``lo`` says

RESEND_HINT = "PS_RESEND=1 resends lost messages"


@dataclass
class _Peer:
    lo: int = 0
    pending: set[int] = field(default_factory=set)
    answered: OrderedDict[int, Message | None] = field(default_factory=OrderedDict)


class Dedup:
    """Server side: decides whether a request is new, and answers duplicates and probes."""

    def __init__(self, who: str, resend: bool) -> None:
        self.who = who
        self.resend = resend
        self.peers: dict[bytes, _Peer] = {}
        self.duplicates = 0

    def admit(self, peer: bytes, msg: Message) -> tuple[bool, list[Message]]:
        """(apply ``msg``?, messages to send back to ``peer`` now)."""
        seq = msg.get("seq")
        if not isinstance(seq, int):
            return msg.op != PROBE, []
        state = self.peers.get(peer)
        if state is None:
            state = self.peers[peer] = _Peer()
        lo = msg.get("lo")
        if isinstance(lo, int) and lo > state.lo:
            state.lo = lo
            state.pending = {s for s in state.pending if s >= lo}
            for old in [s for s in state.answered if s < lo]:
                del state.answered[old]
        if seq < state.lo:
            self.duplicates += msg.op != PROBE
            return False, []
        if seq in state.pending:
            self.duplicates += msg.op != PROBE
            return False, [Message(ACK, {"seq": seq})]
        if seq in state.answered:
            self.duplicates += msg.op != PROBE
            reply = state.answered[seq]
            if reply is None:
                what = describe_request(msg)
                reason = f"{self.who} answered {what} but the reply was lost; {RESEND_HINT}"
                return False, [Message(Op.ERROR, {"seq": seq, "reason": reason})]
            return False, [reply]
        if msg.op == PROBE:
            reason = f"{self.who} never received {describe_request(msg)}: it was lost; {RESEND_HINT}"
            return False, [Message(Op.ERROR, {"seq": seq, "reason": reason})]
        state.pending.add(seq)
        return True, [Message(ACK, {"seq": seq})] if self.resend else []

    def answered(self, peer: bytes, reply: Message) -> None:
        """Record the reply sent to ``peer`` (for replay with PS_RESEND=1)."""
        seq = reply.get("seq")
        state = self.peers.get(peer)
        if state is None or not isinstance(seq, int):
            return
        state.pending.discard(seq)
        if seq < state.lo:
            return
        state.answered[seq] = reply if self.resend else None
        while len(state.answered) > MAX_TRACKED:
            state.answered.popitem(last=False)


def describe_request(msg: Message) -> str:
    """``push of key 3 (seq 12) from worker 0``: a request (or a probe of one) for error messages."""
    op = msg.get("of", msg.op)
    return f"{op} of key {msg.get('key')} (seq {msg.get('seq')}) from worker {msg.get('rank', '?')}"


@dataclass
class _Sent:
    msg: Message
    sent_at: float
    acked: bool = False
    tries: int = 1


class Outbox:
    """Worker side: the requests still waiting for a reply, per server, and their timers."""

    def __init__(self, num_servers: int, resend: bool, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.resend = resend
        self.timeout_s = timeout_s
        self.clock = clock
        self.waiting: list[dict[int, _Sent]] = [{} for _ in range(num_servers)]
        self.resent = 0

    def add(self, server: int, msg: Message) -> None:
        """Track ``msg`` (which has its ``seq``) and stamp ``lo`` on it; call right before sending."""
        seq = msg["seq"]
        kept = msg if self.resend else Message(msg.op, msg.fields)  # arrays only needed to resend
        self.waiting[server][seq] = _Sent(kept, self.clock())
        msg.fields["lo"] = next(iter(self.waiting[server]))

    def answered(self, server: int, seq: int) -> bool:
        """Forget ``seq``; False when it was not waiting (a duplicate or abandoned reply)."""
        return self.waiting[server].pop(seq, None) is not None

    def acked(self, server: int, seq: int) -> None:
        sent = self.waiting[server].get(seq)
        if sent is not None:
            sent.acked = True
            sent.sent_at = self.clock()

    def forget(self, seqs: set[int]) -> None:
        """Stop waiting for ``seqs`` (after an error); their late replies are then ignored."""
        for waiting in self.waiting:
            for seq in seqs & waiting.keys():
                del waiting[seq]

    def pending(self, seqs: Iterable[int]) -> list[tuple[int, Message]]:
        """(server, request header) of each of ``seqs`` still waiting for its reply, in the order given."""
        return [(server, w[seq].msg) for seq in seqs for server, w in enumerate(self.waiting) if seq in w]

    def due(self) -> list[tuple[int, Message]]:
        """Messages to send now: resends of unacknowledged requests, or probes."""
        now = self.clock()
        out: list[tuple[int, Message]] = []
        for server, waiting in enumerate(self.waiting):
            if not waiting:
                continue
            lo = next(iter(waiting))
            for seq, sent in waiting.items():
                if now - sent.sent_at < self.timeout_s:
                    continue
                sent.sent_at = now
                if self.resend and not sent.acked:
                    if sent.tries >= RESEND_LIMIT:
                        reason = (
                            f"server {server} did not acknowledge {describe_request(sent.msg)} after {sent.tries} "
                            f"sends {self.timeout_s * 1000:g} ms apart (PS_RESEND_TIMEOUT)"
                        )
                        out.append((server, Message(Op.ERROR, {"seq": seq, "reason": reason, "local": True})))
                        continue
                    sent.tries += 1
                    sent.msg.fields["lo"] = lo
                    self.resent += 1
                    out.append((server, sent.msg))
                else:
                    fields = {k: sent.msg.get(k) for k in ("seq", "key", "rank")}
                    out.append((server, Message(PROBE, {**fields, "lo": lo, "of": sent.msg.op})))
        return out
