"""Telling a ps-lite node by its first message (clipflow.ps.foreign.ps_lite_join): a real MXNet worker's frame is
one, and so is ps-lite's form of it with another host, port or role; random bytes, other frames of its length,
and its form with any field changed, added or cut are not (None, never an exception)."""

from __future__ import annotations

import random

import pytest
from ps_lite_helpers import KEMPTY, MXNET_ADD_NODE, add_node, field, node

from clipflow.ps.foreign import ps_lite_join
from clipflow.ps.transport import foreign_protocol

JOIN = "a ps-lite worker at 127.0.0.1:9100 asking to join (ADD_NODE)"


def test_a_real_mxnet_workers_first_message_is_ps_lites_and_our_copy_of_its_form_is_byte_equal() -> None:
    assert add_node() == MXNET_ADD_NODE
    assert ps_lite_join([MXNET_ADD_NODE]) == JOIN
    assert foreign_protocol([MXNET_ADD_NODE]) == f"it looks like ps-lite (MXNet's kvstore), {JOIN}"


@pytest.mark.parametrize(
    ("frame", "join"),
    [
        (add_node([node(role=0, hostname=b"10.0.0.2", port=9200)]), "a ps-lite server at 10.0.0.2:9200"),
        (add_node([node(hostname=b"node-7.example.org", port=1)]), "a ps-lite worker at node-7.example.org:1"),
        (add_node(timestamp=3, customer_id=0, data_size=0), "a ps-lite worker at 127.0.0.1:9100"),  # other versions
        (add_node(pull=None, priority=None, data_size=None, head=None), "a ps-lite worker at 127.0.0.1:9100"),
        (add_node([node(is_recovery=1)]), "a ps-lite worker at 127.0.0.1:9100"),
    ],
)
def test_ps_lites_form_with_other_values_is_ps_lites(frame: bytes, join: str) -> None:
    assert ps_lite_join([frame]) == f"{join} asking to join (ADD_NODE)"


def _not_ps_lite() -> dict[str, list[bytes]]:
    rng = random.Random(30)
    real = MXNET_ADD_NODE
    return {
        "empty": [b""],
        "no frames": [],
        "two frames": [real, real],
        "random 4 KiB": [rng.randbytes(4096)],
        "random, its length": [rng.randbytes(len(real))],
        "zeros, its length": [bytes(len(real))],
        "json": [b'{"op": "register", "role": "worker"}'],
        "text": [b"hello, scheduler\n"],
        "deep": [b"[" * 100_000],
        "cut": [real[:-1]],
        "a byte more": [real + b"\0"],
        "heartbeat": [add_node(cmd=5)],  # a node's later message
        "barrier": [add_node(cmd=3, control={3: 1})],
        "no node": [add_node([])],
        "two nodes": [add_node([node(), node()])],
        "scheduler": [add_node([node(role=2)])],
        "role 7": [add_node([node(role=7)])],
        "an id": [add_node([node(id=3)])],
        "no host": [add_node([node(hostname=None)])],
        "empty host": [add_node([node(hostname=b"")])],
        "host with a newline": [add_node([node(hostname=b"a\nb")])],
        "port 0": [add_node([node(port=0)])],
        "port 70000": [add_node([node(port=70000)])],
        "node field 6": [add_node([node(f6=1)])],
        "control field 5": [add_node(control={5: 1})],
        "a body": [add_node(body=b"x")],
        "data types": [add_node(data_type=b"\x01")],
        "meta field 14": [add_node(f14=1)],
        "push 2": [add_node(push=2)],
        "head twice": [add_node() + field(1, KEMPTY)],
        "control twice": [add_node() + field(3, b"\x08\x02")],
        "control as a number": [field(3, 2)],
        "port as bytes": [add_node([node(port=b"9100")])],
    }


@pytest.mark.parametrize("case", list(_not_ps_lite()))
def test_anything_else_is_not_ps_lites_first_message(case: str) -> None:
    frames = _not_ps_lite()[case]
    assert ps_lite_join(frames) is None
    assert foreign_protocol(frames) == ""


def test_a_mutated_first_message_reads_without_an_exception() -> None:
    """Bytes flipped, cut or inserted anywhere in the real frame: an answer each time, never an exception; the
    ones still taken for ps-lite's are of its form (checked by the description they give)."""
    rng = random.Random(7)
    taken = 0
    for _ in range(3000):
        data = bytearray(MXNET_ADD_NODE)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            kind = rng.randrange(3)
            if kind == 0:
                data[at] = rng.randrange(256)
            elif kind == 1:
                del data[at]
            else:
                data.insert(at, rng.randrange(256))
        join = ps_lite_join([bytes(data)])
        if join is not None:
            taken += 1
            assert join.startswith(("a ps-lite worker at ", "a ps-lite server at ")), join
    assert taken < 3000 // 10, taken  # most changes break the form
