"""The one place that turns messages into zmq frames and back.

A message is a zmq multipart message: frame 0 is a small UTF-8 JSON header
(``op`` plus free fields such as ``key``, ``seq``, ``rank``), then one frame per
array, sent without copying. The header lists each array's dtype and shape
under ``arrays`` so the receiver can wrap the frame's buffer with
``np.frombuffer`` (no copy; the result is read-only). No pickle is involved.
Compression (e.g. 2-bit gradients) would slot in here as another array encoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from clipflow.errors import CommError

# dtypes a peer may declare; anything else is refused rather than interpreted.
WIRE_DTYPES = frozenset({"float32", "float64", "float16", "int32", "int64", "uint8", "uint32"})  # uint32: 2-bit words
MAX_HEADER_BYTES = 1 << 20


class Op:
    """Operation names (the ``op`` header field)."""

    # node <-> scheduler
    REGISTER = "register"
    WELCOME = "welcome"
    HEARTBEAT = "heartbeat"
    HEARTBEAT_ACK = "heartbeat_ack"
    BARRIER = "barrier"
    BARRIER_DONE = "barrier_done"
    DONE = "done"
    FAIL = "fail"
    ABORT = "abort"
    SHUTDOWN = "shutdown"
    # worker <-> server
    INIT = "init"
    PUSH = "push"
    PULL = "pull"
    PUSHPULL = "pushpull"
    STATS = "stats"
    OK = "ok"
    VALUE = "value"
    ERROR = "error"
    # worker -> server: optimizer on the servers (update_on_kvstore), see clipflow.ps.store
    SET_OPTIMIZER = "set_optimizer"
    SET_MULT = "set_mult"
    GET_STATES = "get_states"
    SET_STATES = "set_states"
    # worker -> server on the same machine: map a shared-memory region, see clipflow.ps.shm
    SHM_ATTACH = "shm_attach"


class WireError(CommError, ValueError):
    """A message that is broken or out of protocol: frames that do not decode, a field missing or of the
    wrong kind, a request a server refuses. A :class:`~clipflow.errors.CommError`; still a ValueError,
    so code that validates a message's fields with ``except (TypeError, ValueError)`` keeps catching it."""


@dataclass
class Message:
    """One message: an operation name, JSON-able fields and raw arrays."""

    op: str
    fields: dict[str, Any] = field(default_factory=dict)
    arrays: list[np.ndarray] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise WireError(f"{self.op} message lacks field {name!r}") from None

    def describe(self) -> str:
        """Short one-line summary for PS_VERBOSE=2 logs."""
        parts = [self.op]
        parts += [f"{k}={v}" for k, v in self.fields.items() if k in ("key", "seq", "rank", "role", "group")]
        parts += [f"[{a.dtype} {tuple(a.shape)}]" for a in self.arrays]
        return " ".join(parts)


def encode(msg: Message) -> list[Any]:
    """Frames for ``msg``: JSON header, then each array's buffer (not copied)."""
    if "op" in msg.fields or "arrays" in msg.fields:
        raise WireError("message fields may not be named 'op' or 'arrays'")
    arrays = [np.ascontiguousarray(a) for a in msg.arrays]
    for a in arrays:
        if a.dtype.name not in WIRE_DTYPES:
            raise WireError(f"dtype {a.dtype.name} cannot be sent; use one of {sorted(WIRE_DTYPES)}")
    header = {"op": msg.op, **msg.fields, "arrays": [[a.dtype.name, list(a.shape)] for a in arrays]}
    frames: list[Any] = [json.dumps(header, separators=(",", ":")).encode("utf-8")]
    frames += [memoryview(a.reshape(-1)).cast("B") if a.size else b"" for a in arrays]
    return frames


def decode(frames: Sequence[zmq.Frame | bytes]) -> Message:
    """Inverse of :func:`encode`; arrays are read-only views of the received frames."""
    if not frames:
        raise WireError("empty message")
    head = _bytes(frames[0])
    if len(head) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(head)} bytes is too large")
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"header is not UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise WireError("header must be a JSON object with a string 'op'")
    specs = header.pop("arrays", [])
    op = header.pop("op")
    if not isinstance(specs, list) or len(specs) != len(frames) - 1:
        raise WireError(f"{op}: header announces {specs!r} but {len(frames) - 1} array frames came")
    arrays = [_array(op, spec, frame) for spec, frame in zip(specs, frames[1:], strict=True)]
    return Message(op, header, arrays)


def _array(op: str, spec: Any, frame: zmq.Frame | bytes) -> np.ndarray:
    try:
        dtype_name, shape = spec
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise WireError(f"{op}: bad array spec {spec!r}") from None
    if dtype_name not in WIRE_DTYPES or any(s < 0 for s in shape):
        raise WireError(f"{op}: bad array spec {spec!r}")
    dtype = np.dtype(dtype_name)
    buf = frame.buffer if isinstance(frame, zmq.Frame) else frame
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(buf) != expected:
        raise WireError(f"{op}: array {spec!r} needs {expected} bytes, frame has {len(buf)}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _bytes(frame: zmq.Frame | bytes) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)
