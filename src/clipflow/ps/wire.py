"""The one place that turns messages into zmq frames and back.

A message is a zmq multipart message: frame 0 is a small UTF-8 JSON header
(``op`` plus free fields such as ``key``, ``seq``, ``rank``), then one frame per
array, sent without copying. The header lists each array's dtype and shape
under ``arrays`` so the receiver can wrap the frame's buffer with
``np.frombuffer`` (no copy; the result is read-only). No pickle is involved.
Compression (e.g. 2-bit gradients) would slot in here as another array encoding.

Received bytes are untrusted (with ``CLIPFLOW_PS_SECURITY=none`` any local process can
send them): :func:`decode` turns every malformed message into a :class:`WireError`, and
nothing else. A header is at most :data:`MAX_HEADER_BYTES` of UTF-8 JSON, an object
nested at most :data:`MAX_DEPTH` deep, whose numbers are finite and whose integers fit
in 64 bits; an array is one of :data:`WIRE_DTYPES` with a shape of at most
:data:`MAX_NDIM` integers >= 0 whose size is exactly its frame's. Handlers read fields
with :meth:`Message.integer` and :meth:`Message.text`, which raise WireError too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from clipflow.errors import CommError

# dtypes a peer may declare; anything else is refused rather than interpreted.
WIRE_DTYPES = frozenset({"float32", "float64", "float16", "int32", "int64", "uint8", "uint32"})  # uint32: 2-bit words
MAX_HEADER_BYTES = 1 << 20
MAX_DEPTH = 32  # JSON nesting of a header; the protocol's own messages go 4 deep
MAX_ARRAYS = 1 << 16  # array frames in one message
MAX_NDIM = 32
INT64 = 1 << 63  # header integers lie in [-INT64, INT64)
OP_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_REQUIRED: Any = object()


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


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters: a peer's value quoted in a message or a log line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass
class Message:
    """One message: an operation name, JSON-able fields and raw arrays.

    ``origin`` is the first frame it came in (None for a message made here): the sender's address
    (:func:`clipflow.ps.transport.sender_of`).
    """

    op: str
    fields: dict[str, Any] = field(default_factory=dict)
    arrays: list[np.ndarray] = field(default_factory=list)
    origin: Any = field(default=None, repr=False, compare=False)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise WireError(f"{self.op} message lacks field {name!r}") from None

    def integer(self, name: str, low: int | None = None, high: int | None = None, default: Any = _REQUIRED) -> Any:
        """Field ``name``, an integer (not a bool) in ``low..high``; absent or null: ``default`` if given."""
        value = self.fields.get(name)
        if value is None and default is not _REQUIRED:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            bounds = f" in {low}..{high}" if high is not None else f" >= {low}" if low is not None else ""
            raise WireError(f"{self.op}: {name} must be an integer{bounds}, got {shown(value)}")
        return value

    def text(self, name: str, pattern: re.Pattern[str] | None = None, default: Any = _REQUIRED) -> Any:
        """Field ``name``, a string matching ``pattern`` in full; absent or null: ``default`` if given."""
        value = self.fields.get(name)
        if value is None and default is not _REQUIRED:
            return default
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            what = "a string" if pattern is None else f"a string matching {pattern.pattern}"
            raise WireError(f"{self.op}: {name} must be {what}, got {shown(value)}")
        return value

    def describe(self) -> str:
        """Short one-line summary for PS_VERBOSE=2 logs."""
        parts = [self.op]
        parts += [f"{k}={str(v)[:40]}" for k, v in self.fields.items() if k in ("key", "seq", "rank", "role", "group")]
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
    """Inverse of :func:`encode`; arrays are read-only views of the received frames.

    Raises WireError, and nothing else, for any frames that are not such a message.
    """
    if not frames:
        raise WireError("empty message")
    if len(frames) - 1 > MAX_ARRAYS:
        raise WireError(f"{len(frames)} frames; a message has at most {MAX_ARRAYS + 1}")
    header = _header(frames[0])
    op = header.pop("op", None)
    if not isinstance(op, str) or not OP_NAME.fullmatch(op):
        raise WireError(f"header's op must be a lower-case name, got {shown(op)}")
    specs = header.pop("arrays", [])
    if not isinstance(specs, list) or len(specs) != len(frames) - 1:
        announced = f"{len(specs)} arrays" if isinstance(specs, list) else f"arrays {shown(specs)}"
        raise WireError(f"{op}: header announces {announced} but {len(frames) - 1} array frames came")
    arrays = [_array(op, i, spec, frame) for i, (spec, frame) in enumerate(zip(specs, frames[1:], strict=True))]
    return Message(op, header, arrays)


def _header(frame: zmq.Frame | bytes) -> dict[str, Any]:
    """Frame 0 as a checked JSON object."""
    size = len(frame)
    if size > MAX_HEADER_BYTES:
        raise WireError(f"header of {size} bytes is too large (at most {MAX_HEADER_BYTES})")
    try:
        text = _bytes(frame).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"header is not UTF-8 JSON: {exc.reason} at byte {exc.start}") from None
    try:
        header = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise WireError(f"header is not UTF-8 JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise WireError(f"header is nested too deeply (at most {MAX_DEPTH} levels)") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a JSON object with a string 'op', got a {type(header).__name__}")
    _check_tree(header)
    return header


def _int(text: str) -> int:
    value = int(text) if len(text) <= 20 else INT64  # int64 needs at most 20 characters; longer is out of range
    if not -INT64 <= value < INT64:
        raise WireError(f"header holds an integer out of range (64 bits): {shown(text)}")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WireError(f"header holds a number out of range: {shown(text)}")
    return value


def _constant(name: str) -> float:
    raise WireError(f"header holds {name}, which is not a JSON number")


def _check_tree(header: dict[str, Any]) -> None:
    """At most MAX_DEPTH levels of objects and arrays; strings encodable as UTF-8 (no lone surrogates)."""
    stack: list[tuple[Any, int]] = [(header, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if isinstance(value, dict):
            children = [*value, *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise WireError(f"header is nested too deeply (at most {MAX_DEPTH} levels)")
        stack.extend((child, depth + 1) for child in children)


def _check_text(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise WireError(f"header holds a string that is not valid Unicode: {shown(text)}") from None


def _array(op: str, index: int, spec: Any, frame: zmq.Frame | bytes) -> np.ndarray:
    """Array ``index`` of the message: its frame's bytes as described by ``spec`` ([dtype, shape])."""
    if not (isinstance(spec, list) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], list)):
        raise WireError(f"{op}: array {index} is described as {shown(spec)}, not as [dtype, shape]")
    dtype_name, shape = spec
    if dtype_name not in WIRE_DTYPES:
        raise WireError(f"{op}: array {index} has dtype {shown(dtype_name)}, not one of {sorted(WIRE_DTYPES)}")
    if len(shape) > MAX_NDIM or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise WireError(f"{op}: array {index} has shape {shown(shape)}, not at most {MAX_NDIM} integers >= 0")
    dtype = np.dtype(dtype_name)
    buf = frame.buffer if isinstance(frame, zmq.Frame) else frame
    size = buf.nbytes if isinstance(buf, memoryview) else len(buf)
    expected = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
    if size != expected:
        raise WireError(f"{op}: array {shown(spec)} needs {expected} bytes, frame has {size}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _bytes(frame: zmq.Frame | bytes) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)
