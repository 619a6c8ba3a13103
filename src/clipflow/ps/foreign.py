"""Telling a peer that speaks another protocol: what a ps-lite node (MXNet's kvstore) sends first.

clipflow's messages start with a JSON object (:mod:`clipflow.ps.wire`). A ps-lite node (MXNet 1.x's
``dist_sync`` / ``dist_async`` kvstore) connects a DEALER to the scheduler and sends one frame: its message
meta as protocol-buffer bytes (``PBMeta``), whose field 3 is the control part (``PBControl``: field 1 the command,
2 for ADD_NODE, a node asking to join; field 2 the node: role 0 server, 1 worker, 2 scheduler, then its id, its
host name as field 3 and its port as field 4). :func:`ps_lite_join` reads just enough of those bytes to say so.
It is a reading of untrusted bytes: anything unexpected gives None, never an exception.
"""

from __future__ import annotations

ADD_NODE = 2
PS_LITE_ROLES = {0: "server", 1: "worker", 2: "scheduler"}
MAX_FIELDS = 256  # a ps-lite meta has a few dozen; more is not one


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


def protobuf_fields(data: bytes) -> dict[int, list[int | bytes]]:
    """The fields of protocol-buffer bytes (number -> values: an int, or the bytes of a length-delimited one);
    ValueError when ``data`` is not a whole protocol-buffer message."""
    fields: dict[int, list[int | bytes]] = {}
    at = count = 0
    while at < len(data):
        count += 1
        if count > MAX_FIELDS:
            raise ValueError("too many fields")
        key, at = _varint(data, at)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        value: int | bytes
        if kind == 0:
            value, at = _varint(data, at)
        elif kind == 1 or kind == 5:
            size = 8 if kind == 1 else 4
            if at + size > len(data):
                raise ValueError("truncated fixed field")
            value, at = int.from_bytes(data[at : at + size], "little"), at + size
        elif kind == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"wire type {kind}")
        fields.setdefault(number, []).append(value)
    return fields


def ps_lite_join(frame: bytes) -> str | None:
    """What a ps-lite node's first message says, e.g. ``a ps-lite worker at 10.0.0.2:9100 asking to join
    (ADD_NODE)``; None when ``frame`` is not such a message."""
    try:
        meta = protobuf_fields(frame)
        control = meta.get(3, [])
        if len(control) != 1 or not isinstance(control[0], bytes):
            return None
        parts = protobuf_fields(control[0])
        if parts.get(1) != [ADD_NODE]:
            return None
        nodes = [protobuf_fields(node) for node in parts.get(2, []) if isinstance(node, bytes)]
    except ValueError:
        return None
    if not nodes:
        return "a ps-lite node asking to join (ADD_NODE)"
    node = nodes[0]
    role = PS_LITE_ROLES.get(node.get(1, [None])[0], "node")  # type: ignore[arg-type]
    host = node.get(3, [b""])[0]
    port = node.get(4, [None])[0]
    where = ""
    if isinstance(host, bytes) and host.isascii() and host.decode("ascii").isprintable() and len(host) <= 255:
        where = f" at {host.decode('ascii')}" + (f":{port}" if isinstance(port, int) else "")
    return f"a ps-lite {role}{where} asking to join (ADD_NODE)"
