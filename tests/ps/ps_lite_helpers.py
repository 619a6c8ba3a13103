"""A ps-lite node's first message, for tests/ps/test_foreign.py and tests/ps/test_badinput.py.

:data:`MXNET_ADD_NODE` is the frame a real MXNet 1.9.1 worker (tests/launch/mxnet-requirements.txt;
DMLC_ROLE=worker, DMLC_NODE_HOST=127.0.0.1, PORT=9100) sent to the ROUTER it took for its scheduler, as received
there. :func:`add_node` writes such a frame as ps-lite's ``Van::PackMeta`` does (protocol buffers of its
``src/meta.proto``, fields in number order), with any field changed or added, for the frames of the right form
but wrong contents.
"""

from __future__ import annotations

KEMPTY = 2**31 - 1  # ps-lite's Node::kEmpty and Meta::kEmpty
# captured with PORT=9100 (ps-lite's own port); the ROUTER saw it from socket identity 0x006b8b4567 (zmq's own)
MXNET_ADD_NODE = bytes.fromhex(
    "08ffffffff071a1e0802121a080110ffffffff071a093132372e302e302e31208c4728005000200028003000400050ffffffff0760006800"
)


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int32 is written as 10 bytes, as protobuf does
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    """One protocol-buffer field: a varint for an int, length-delimited for bytes."""
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def message(fields: dict[int, int | bytes | list[int | bytes] | None]) -> bytes:
    """Fields in number order (None: left out; a list: repeated)."""
    out = b""
    for number in sorted(fields):
        values = fields[number]
        for value in values if isinstance(values, list) else [] if values is None else [values]:
            out += field(number, value)
    return out


def node(**changes: int | bytes | list | None) -> bytes:
    """PBNode of a worker asking to join: role 1, id kEmpty, its host and port, not recovering, customer 0."""
    names = {"role": 1, "id": 2, "hostname": 3, "port": 4, "is_recovery": 5, "customer_id": 10}
    fields: dict = {1: 1, 2: KEMPTY, 3: b"127.0.0.1", 4: 9100, 5: 0, 10: 0}
    for name, value in changes.items():
        fields[names.get(name, 0) or int(name.removeprefix("f"))] = value
    return message(fields)


def add_node(nodes: list[bytes] | None = None, cmd: int = 2, control: dict | None = None, **meta: object) -> bytes:
    """PBMeta of ps-lite's ADD_NODE as Van::PackMeta writes it (head, timestamp 0, flags false, the customer id
    kEmpty) with one :func:`node`; ``control`` adds PBControl fields, ``meta`` changes PBMeta's (``f<number>``
    for one ps-lite does not write)."""
    names = {"head": 1, "body": 2, "request": 4, "push": 5, "simple_app": 6, "app_id": 7, "timestamp": 8,
             "data_type": 9, "customer_id": 10, "data_size": 11, "pull": 12, "priority": 13}  # fmt: skip
    ctrl: dict = {1: cmd, 2: [node()] if nodes is None else nodes, **(control or {})}
    fields: dict = {1: KEMPTY, 3: message(ctrl), 4: 0, 5: 0, 6: 0, 8: 0, 10: KEMPTY, 12: 0, 13: 0}
    for name, value in meta.items():
        fields[names.get(name, 0) or int(name.removeprefix("f"))] = value
    return message(fields)
