"""Telling a ps-lite node (MXNet's kvstore) by its first message, and nothing else by it.

clipflow's messages start with a JSON object (:mod:`clipflow.ps.wire`). A ps-lite node (MXNet 1.x's
``dist_sync`` / ``dist_async`` kvstore) started against a clipflow scheduler connects a DEALER to it and sends,
as its first message, one frame: its message meta as protocol-buffer bytes. Its form, from ps-lite's
``src/meta.proto``, ``Van::Start`` (the message) and ``Van::PackMeta`` (what it writes of it):

* ``PBMeta``: field 3 the control part, once; the others, when written, are numbers (1 head, 4 request,
  5 push, 6 simple_app, 7 app_id, 8 timestamp, 10 customer_id, 11 data_size, 12 pull, 13 priority; the four
  flags 0 or 1); no body (2) and no data types (9, packed) on a control message.
* ``PBControl``: field 1 the command, 2 (``ADD_NODE``: a node asking to join); field 2 the node, exactly one;
  no barrier group (3) or signature (4), which ps-lite writes only for BARRIER and ACK.
* ``PBNode``: field 1 its role (0 server, 1 worker: the scheduler never asks to join), field 2 its id, still
  ``Node::kEmpty`` (2^31 - 1: the scheduler hands ids out), field 3 its host name or address, field 4 its port,
  5 is_recovery (0 or 1), 10 customer_id.

:func:`ps_lite_join` takes a message for ps-lite's only when all of that holds: every field known, each of its
wire type, each written at most once, nothing left over. Random bytes, other protocol buffers, a cut or altered
copy of such a message are not it (the starting job drops and logs them, naming the sender). It reads
untrusted bytes: anything unexpected gives None, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence

ADD_NODE = 2
NODE_ID_EMPTY = 2**31 - 1  # ps-lite's Node::kEmpty
PS_LITE_ROLES = {0: "server", 1: "worker"}  # the roles that ask to join (2, the scheduler, never does)
MAX_FIELDS = 64  # a ps-lite meta has about a dozen; more is not one
MAX_BYTES = 1024  # its size: some 60 bytes and the host name (at most 255)
MAX_HOST = 255
VARINT, LENGTH = 0, 2  # protocol-buffer wire types

# message -> field number -> its wire type; a field ps-lite does not write there is not in the table
META = {1: VARINT, 3: LENGTH, 4: VARINT, 5: VARINT, 6: VARINT, 7: VARINT, 8: VARINT, 10: VARINT, 11: VARINT,
        12: VARINT, 13: VARINT}  # fmt: skip
META_FLAGS = (4, 5, 6, 12)
CONTROL = {1: VARINT, 2: LENGTH}
NODE = {1: VARINT, 2: VARINT, 3: LENGTH, 4: VARINT, 5: VARINT, 10: VARINT}
CONTROL_NODES = 2  # the one repeated field (ps-lite writes one node on ADD_NODE)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def protobuf_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """The fields of protocol-buffer bytes in order, as (number, wire type, value: an int, or the bytes of a
    length-delimited one); ValueError when ``data`` is not a whole protocol-buffer message."""
    fields: list[tuple[int, int, int | bytes]] = []
    at = 0
    while at < len(data):
        if len(fields) >= MAX_FIELDS:
            raise ValueError("too many fields")
        key, at = _varint(data, at)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        value: int | bytes
        if kind == VARINT:
            value, at = _varint(data, at)
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            if at + size > len(data):
                raise ValueError("truncated fixed field")
            value, at = int.from_bytes(data[at : at + size], "little"), at + size
        elif kind == LENGTH:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"wire type {kind}")
        fields.append((number, kind, value))
    return fields


def _message(data: int | bytes, spec: dict[int, int], repeated: int | None = None) -> dict[int, list]:
    """The fields of ``data`` read as the message ``spec`` describes (number -> values); ValueError on a field
    ``spec`` does not hold, one of another wire type, or one written twice that is not the ``repeated`` one."""
    if not isinstance(data, bytes):
        raise ValueError("not a message")
    fields: dict[int, list] = {}
    for number, kind, value in protobuf_fields(data):
        if spec.get(number) != kind:
            raise ValueError(f"field {number} of wire type {kind}")
        if number in fields and number != repeated:
            raise ValueError(f"field {number} twice")
        fields.setdefault(number, []).append(value)
    return fields


def ps_lite_join(frames: Sequence[bytes]) -> str | None:
    """What a ps-lite node's first message (``frames``, the whole message) says, e.g. ``a ps-lite worker at
    10.0.0.2:9100 asking to join (ADD_NODE)``; None when it is not exactly such a message (see the module).
    Only a message of one frame is read (``bytes(frame)``: a zmq.Frame will do)."""
    if len(frames) != 1 or len(frames[0]) > MAX_BYTES:  # nothing larger is read (or copied)
        return None
    try:
        meta = _message(bytes(frames[0]), META)
        if len(meta.get(3, [])) != 1 or any(meta.get(flag, [0])[0] not in (0, 1) for flag in META_FLAGS):
            return None
        control = _message(meta[3][0], CONTROL, repeated=CONTROL_NODES)
        if control.get(1) != [ADD_NODE] or len(control.get(CONTROL_NODES, [])) != 1:
            return None
        node = _message(control[CONTROL_NODES][0], NODE)
    except ValueError:
        return None
    role = PS_LITE_ROLES.get(node.get(1, [None])[0])  # type: ignore[arg-type]
    host, port = node.get(3, [b""])[0], node.get(4, [0])[0]
    if role is None or node.get(2) != [NODE_ID_EMPTY] or node.get(5, [0])[0] not in (0, 1):
        return None
    if not (0 < len(host) <= MAX_HOST and host.isascii() and host.decode("ascii").isprintable()):
        return None
    if not 0 < port < 65536:
        return None
    return f"a ps-lite {role} at {host.decode('ascii')}:{port} asking to join (ADD_NODE)"
