"""A worker's requests to the servers, tracked from sending to reply (the role of ps-lite's ``Customer``).

The KVStore decides what to ask; a :class:`Customer` sends it and keeps track of it:

* :meth:`Customer.request` numbers a :class:`Request` (``seq``: unique and increasing per worker; the
  KVStore's barriers draw from the same counter, :meth:`Customer.next_seq`), sends it to its server and
  keeps it in an :class:`~clipflow.ps.reliable.Outbox` until the reply comes;
* :meth:`Customer.wait` waits for the replies to a set of seqs, optionally within a :class:`Timeout`. While
  it waits it reads every server's socket, drops acknowledgements and duplicate replies, and resends or
  probes requests that stay unanswered (PS_RESEND, see :mod:`clipflow.ps.reliable`);
* :meth:`Customer.defer` and :meth:`Customer.settle` let a push return before its reply: the reply is
  awaited by the next call that needs it (a later call on the key, a barrier, close).

Its failures are :class:`~clipflow.errors.CommError`: a server's error reply (its reason says which server
and request), or no reply within the timeout (the message names the server, the request and the setting).
An abort of the job (the scheduler's, seen by the heartbeat thread) ends a wait with
:class:`~clipflow.errors.JobAborted`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import zmq

from clipflow.errors import CommError
from clipflow.ps.log import Log
from clipflow.ps.reliable import ACK, Outbox, describe_request
from clipflow.ps.transport import INVALID_OP, Channel
from clipflow.ps.wire import Message, Op

POLL_MS = 100


@dataclass(frozen=True)
class Request:
    """One request to one server: its operation, key (-1: none) and arrays, and the other header fields."""

    server: int
    op: str
    key: int = -1
    arrays: Sequence[np.ndarray] = ()
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Timeout:
    """How long a wait may take, and the setting it comes from (named when it passes)."""

    seconds: float
    setting: str


class Customer:
    """Sends a worker's requests over its server channels (index = server rank) and collects the replies.

    Used from one thread, like the KVStore that owns it; closing it closes the channels.
    """

    def __init__(
        self,
        servers: Sequence[Channel],
        rank: int,
        resend: bool,
        resend_timeout_s: float,
        check_abort: Callable[[], None],
        log: Log,
    ) -> None:
        self._servers = list(servers)
        self._rank = rank
        self._check_abort = check_abort
        self._log = log
        self._outbox = Outbox(len(self._servers), resend, resend_timeout_s)
        self._poll_ms = max(1, min(POLL_MS, int(resend_timeout_s * 500)))  # twice per resend timeout at least
        self._seq = 0
        self._replies: dict[int, tuple[int, Message]] = {}  # seq -> (server, reply) not yet handed out
        self._deferred: dict[int, list[int]] = {}  # key -> seqs of pushes whose replies nobody waited for yet
        self._server_of: dict[zmq.Socket, int] = {}
        self._poller = zmq.Poller()
        for server, channel in enumerate(self._servers):
            self._server_of[channel.sock] = server
            self._poller.register(channel.sock, zmq.POLLIN)

    @property
    def resent(self) -> int:
        """Requests sent again because their server did not acknowledge them in time."""
        return self._outbox.resent

    @property
    def dropped(self) -> int:
        """Replies dropped on purpose on receipt (CLIPFLOW_PS_DROP_PERCENT)."""
        return sum(c.dropper.dropped for c in self._servers if c.dropper is not None)

    def next_seq(self) -> int:
        """A fresh sequence number."""
        self._seq += 1
        return self._seq

    def request(self, req: Request) -> int:
        """Send ``req`` (stamped with a fresh seq and this worker's rank) and track it; return its seq.

        A request that cannot leave counts as lost: it is resent or probed like one lost on the way.
        """
        seq = self.next_seq()
        msg = Message(req.op, {"key": req.key, "seq": seq, "rank": self._rank, **req.fields}, list(req.arrays))
        self._outbox.add(req.server, msg)
        self._servers[req.server].try_send(msg)
        return seq

    def wait(self, seqs: Collection[int], timeout: Timeout | None = None) -> dict[int, Message]:
        """The replies to ``seqs``, by seq, once all came.

        Raises CommError on the first error reply among them (the others are then abandoned: their late
        replies are dropped) or when ``timeout`` passes first.
        """
        wanted = set(seqs)
        deadline = None if timeout is None else time.monotonic() + timeout.seconds
        while not wanted.issubset(self._replies):
            self._check_abort()
            if deadline is not None and timeout is not None and time.monotonic() > deadline:
                raise CommError(self._no_answer(wanted, timeout))
            for sock, _ in self._poller.poll(self._poll_ms):
                while sock.poll(0):
                    self._receive(self._server_of[sock])
            self._send_due()
            self._raise_error_reply(wanted)
        return {s: self._replies.pop(s)[1] for s in seqs}

    def defer(self, key: int, seqs: Iterable[int]) -> None:
        """Leave the replies to ``seqs`` (requests about ``key``) for a later :meth:`settle`."""
        self._deferred.setdefault(key, []).extend(seqs)

    def settle(self, keys: Iterable[int] | None = None, timeout: Timeout | None = None) -> None:
        """Wait for the deferred replies of ``keys`` (of every key by default); see :meth:`wait`."""
        chosen = list(self._deferred) if keys is None else keys
        self.wait([s for k in chosen for s in self._deferred.pop(k, [])], timeout)

    def close(self) -> None:
        for channel in self._servers:
            channel.close()

    # -- internals ----------------------------------------------------------------------------

    def _receive(self, server: int) -> None:
        """Take one message from ``server``'s socket: an ACK, or the reply to a request still waiting."""
        channel = self._servers[server]
        got = channel.recv_ready()
        if got is None:  # dropped on purpose (CLIPFLOW_PS_DROP_PERCENT)
            return
        msg = got[1]
        seq = msg.get("seq")
        if msg.op == INVALID_OP:
            self._log.error(f"dropped a message from {channel.name}: {msg.get('reason')}")
        elif not isinstance(seq, int):
            self._log.error(f"ignoring a {msg.op} from {channel.name} without a seq: {msg.get('reason', '')}")
        elif msg.op == ACK:
            self._outbox.acked(server, seq)
        elif self._outbox.answered(server, seq):  # else a duplicate, or the reply to an abandoned request
            self._replies[seq] = (server, msg)

    def _send_due(self) -> None:
        """Resend or probe what the outbox says is due; a request it gave up on gets its error as the reply."""
        for server, msg in self._outbox.due():
            if msg.get("local"):
                self._outbox.answered(server, msg["seq"])
                self._replies[msg["seq"]] = (server, msg)
            else:
                self._servers[server].try_send(msg)

    def _raise_error_reply(self, wanted: set[int]) -> None:
        errors = sorted(s for s in wanted if s in self._replies and self._replies[s][1].op == Op.ERROR)
        if not errors:
            return
        server, reply = self._replies[errors[0]]
        self._outbox.forget(wanted - self._replies.keys())
        for s in wanted:
            self._replies.pop(s, None)
        raise CommError(str(reply.get("reason") or f"server {server} refused request {errors[0]} without a reason"))

    def _no_answer(self, wanted: set[int], timeout: Timeout) -> str:
        missing = self._outbox.pending(sorted(wanted - self._replies.keys()))
        within = f"within {timeout.seconds:g} s ({timeout.setting})"
        if not missing:
            return f"no answer from the servers {within}"
        server, request = missing[0]
        others = f", nor {len(missing) - 1} other requests" if len(missing) > 1 else ""
        return f"server {server} did not answer {describe_request(request)} {within}{others}"
