"""The worker's request tracking (clipflow.ps.customer) against a scripted server: a ROUTER on loopback
that this test reads from and answers by hand, so every reply, duplicate and silence is chosen."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import zmq

from clipflow.errors import ClipflowError, CommError, JobAborted
from clipflow.ps.customer import Customer, Request, Timeout
from clipflow.ps.log import Log
from clipflow.ps.reliable import ACK
from clipflow.ps.transport import Channel, bind_random, connect, make_socket
from clipflow.ps.wire import Message, Op

LOG = Log("test")


@dataclass
class Link:
    """A Customer with one server channel, and the scripted server's end of it."""

    customer: Customer
    server: Channel

    def receive(self) -> tuple[bytes, Message]:
        got = self.server.recv(5.0)
        assert got is not None, "the request never reached the server"
        peer, msg = got
        assert peer is not None
        return peer, msg

    def answer(self, peer: bytes, *replies: Message) -> None:
        for reply in replies:
            self.server.send(reply, peer)


def _link(ctx: zmq.Context, resend: bool = False, resend_timeout_s: float = 30.0, check_abort=lambda: None) -> Link:
    server = Channel(make_socket(ctx, zmq.ROUTER), LOG, "scripted server")
    port = bind_random(server.sock, "127.0.0.1")
    dealer = make_socket(ctx, zmq.DEALER, b"worker-test/d0")
    connect(dealer, "127.0.0.1", port)
    customer = Customer([Channel(dealer, LOG, "server 0")], 0, resend, resend_timeout_s, check_abort, LOG)
    return Link(customer, server)


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    try:
        yield context
    finally:
        context.destroy(linger=0)


def test_wait_returns_the_replies_and_drops_acks_and_duplicates(ctx: zmq.Context) -> None:
    link = _link(ctx)
    seq = link.customer.request(Request(0, Op.PULL, 3, fields={"start": 0}))
    peer, got = link.receive()
    assert (got.op, got["key"], got["seq"], got["rank"], got["start"]) == (Op.PULL, 3, seq, 0, 0)
    value = Message(Op.VALUE, {"seq": seq, "key": 3}, [np.ones(2, dtype=np.float32)])
    link.answer(peer, Message(ACK, {"seq": seq}), value, value)  # the second one is a duplicate
    replies = link.customer.wait([seq])
    assert list(replies) == [seq] and replies[seq].op == Op.VALUE
    later = link.customer.request(Request(0, Op.STATS))
    link.answer(link.receive()[0], Message(Op.STATS, {"seq": later, "keys": {}}))
    assert link.customer.wait([later])[later].op == Op.STATS  # the duplicate was not taken for anything


def test_a_deferred_push_is_settled_by_key(ctx: zmq.Context) -> None:
    link = _link(ctx)
    seqs = [link.customer.request(Request(0, Op.PUSH, 7)) for _ in range(2)]
    link.customer.defer(7, seqs)
    for _ in seqs:
        peer, got = link.receive()
        link.answer(peer, Message(Op.OK, {"seq": got["seq"], "key": 7}))
    link.customer.settle([8])  # nothing deferred for key 8: returns at once
    link.customer.settle([7])
    link.customer.settle()  # and nothing is left


def test_an_error_reply_is_a_communication_failure_and_abandons_the_rest(ctx: zmq.Context) -> None:
    link = _link(ctx)
    first = link.customer.request(Request(0, Op.PUSH, 1))
    second = link.customer.request(Request(0, Op.PUSH, 2))
    peer, _ = link.receive()
    link.receive()
    reason = "server 0: push of key 2 from bad worker rank 9"
    link.answer(peer, Message(Op.ERROR, {"seq": second, "reason": reason}))
    with pytest.raises(CommError) as info:
        link.customer.wait([first, second])
    assert str(info.value) == reason and not isinstance(info.value, ClipflowError)
    link.answer(peer, Message(Op.OK, {"seq": first, "key": 1}))  # late: its request was abandoned
    probe = link.customer.request(Request(0, Op.STATS))
    link.answer(link.receive()[0], Message(Op.STATS, {"seq": probe, "keys": {}}))
    assert list(link.customer.wait([probe])) == [probe]


def test_no_answer_within_the_timeout_names_server_request_and_setting(ctx: zmq.Context) -> None:
    link = _link(ctx)
    link.customer.defer(5, [link.customer.request(Request(0, Op.PUSH, 5)) for _ in range(3)])
    want = (
        r"server 0 did not answer push of key 5 \(seq 1\) from worker 0 within 0.2 s "
        r"\(CLIPFLOW_HEARTBEAT_TIMEOUT\), nor 2 other requests"
    )
    with pytest.raises(CommError, match=want):
        link.customer.settle(timeout=Timeout(0.2, "CLIPFLOW_HEARTBEAT_TIMEOUT"))


def test_requests_never_acknowledged_end_in_a_communication_failure(ctx: zmq.Context) -> None:
    link = _link(ctx, resend=True, resend_timeout_s=0.01)  # PS_RESEND=1, PS_RESEND_TIMEOUT=10
    seq = link.customer.request(Request(0, Op.PULL, 4, fields={"start": 0}))
    with pytest.raises(CommError, match=r"server 0 did not acknowledge pull of key 4 \(seq 1\) .*PS_RESEND_TIMEOUT"):
        link.customer.wait([seq])  # the scripted server stays silent
    assert link.customer.resent > 0


def test_an_abort_ends_the_wait(ctx: zmq.Context) -> None:
    def aborted() -> None:
        raise JobAborted("worker 1 on 127.0.0.1 failed: RuntimeError: boom")

    link = _link(ctx, check_abort=aborted)
    seq = link.customer.request(Request(0, Op.PULL, 4, fields={"start": 0}))
    with pytest.raises(JobAborted, match="worker 1 on 127.0.0.1 failed"):
        link.customer.wait([seq])
