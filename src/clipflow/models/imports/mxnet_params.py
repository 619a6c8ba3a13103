"""MXNet's NDArray-list files (what ``mx.nd.save``, Gluon's ``save_parameters`` and ``export`` write) read into
numpy arrays by name, without MXNet.

The layout, all little-endian:

- the list: ``uint64`` magic ``0x112``, ``uint64`` reserved, ``uint64`` count, that many arrays, ``uint64``
  count of names, each name a ``uint64`` length and its UTF-8 bytes (a file of a plain list has no names);
- an array: ``uint32`` magic (``0xF993FAC8`` V1, ``0xF993FAC9`` V2 with a storage type, ``0xF993FACA`` V3, the
  same written under NumPy shape semantics), from V2 on an ``int32`` storage type (0 dense; 1 row-sparse and 2
  CSR are not weights this reader takes), the shape (``int32`` ndim, then ``int64`` per dimension), and unless the
  array is empty (ndim 0 before V3, -1 from V3) the context (``int32`` device type and id), an ``int32`` dtype flag
  and the elements, C order.

Names keep what the writer gave them: ``save_parameters`` the blocks' attribute paths (``fast_conv1.weight``),
``export`` and ``save_checkpoint`` the symbol's names under ``arg:`` (weights) or ``aux:`` (BatchNorm's running
statistics), which :func:`read_params` strips (the kind is already in the name's last part).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clipflow.errors import ClipflowError

LIST_MAGIC = 0x112
ARRAY_MAGICS = {0xF993FAC8: 1, 0xF993FAC9: 2, 0xF993FACA: 3}
STORAGE_KINDS = {1: "row-sparse", 2: "CSR"}
# mshadow's type flags; 12 (bfloat16) has no numpy dtype
DTYPES = {
    0: np.float32,
    1: np.float64,
    2: np.float16,
    3: np.uint8,
    4: np.int32,
    5: np.int8,
    6: np.int64,
    7: np.bool_,
    8: np.int16,
    9: np.uint16,
    10: np.uint32,
    11: np.uint64,
}
NAME_PREFIXES = ("arg:", "aux:")


class _Malformed(Exception):
    """What is wrong at which byte; :func:`read_ndarray_list` names the file."""


class _Unsupported(_Malformed):
    """A well-formed array this reader does not take (sparse, a dtype numpy lacks), with the way out."""


class _Cursor:
    """Reads little-endian values from a byte buffer, each read checked against its end."""

    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def take(self, size: int, what: str) -> memoryview:
        if size < 0 or self.at + size > len(self.data):
            raise _Malformed(f"truncated: {what} at byte {self.at} needs {size} bytes, {len(self.data) - self.at} left")
        view = memoryview(self.data)[self.at : self.at + size]
        self.at += size
        return view

    def number(self, dtype: str, what: str) -> int:
        size = np.dtype(dtype).itemsize
        return int(np.frombuffer(self.take(size, what), dtype=dtype)[0])


def read_ndarray_list(path: Path) -> tuple[list[np.ndarray], list[str]]:
    """The arrays of MXNet NDArray-list file ``path`` and their names (empty for a plain list), in file order;
    ClipflowError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ClipflowError(f"{path}: cannot read it ({err.strerror}); give an MXNet .params file") from None
    cursor = _Cursor(data)
    try:
        if len(data) < 16 or cursor.number("<u8", "the list magic") != LIST_MAGIC:
            raise _Malformed("does not start with the magic of an MXNet NDArray list (0x112)")
        cursor.number("<u8", "the reserved word")
        count = cursor.number("<u8", "the number of arrays")
        arrays = [_array(cursor, i) for i in range(_count(cursor, count, 4, "arrays"))]
        names = [
            _name(cursor, i) for i in range(_count(cursor, cursor.number("<u8", "the number of names"), 8, "names"))
        ]
        if names and len(names) != len(arrays):
            raise _Malformed(f"has {len(arrays)} arrays but {len(names)} names")
        if cursor.at != len(data):
            raise _Malformed(f"has {len(data) - cursor.at} bytes after its last name")
    except _Unsupported as err:
        raise ClipflowError(f"{path}: {err}") from None
    except _Malformed as err:
        raise ClipflowError(f"{path} is not a whole MXNet .params file: {err}; give the file as Gluon's "
                            f"save_parameters (or export) wrote it") from None  # fmt: skip
    return arrays, names


def read_params(path: Path) -> dict[str, np.ndarray]:
    """The named arrays of MXNet parameter file ``path`` (``save_parameters``, ``export``, ``save_checkpoint``,
    ``mx.nd.save`` of a dict), ``arg:``/``aux:`` stripped from their names; ClipflowError naming the file and
    what is wrong (not such a file, cut short, a sparse or unnamed array, a dtype numpy lacks, a name twice)."""
    arrays, names = read_ndarray_list(path)
    if arrays and not names:
        raise ClipflowError(f"{path} holds {len(arrays)} unnamed arrays (mx.nd.save of a list), not named "
                            f"parameters; give the file Gluon's save_parameters wrote")  # fmt: skip
    params: dict[str, np.ndarray] = {}
    for name, array in zip(names, arrays, strict=True):
        key = name[4:] if name.startswith(NAME_PREFIXES) else name
        if key in params:
            raise ClipflowError(f"{path} holds parameter {key} twice; give the file as MXNet wrote it")
        params[key] = array
    return params


def _count(cursor: _Cursor, count: int, least_bytes: int, what: str) -> int:
    # each item takes at least least_bytes: a count the rest of the file cannot hold is garbage, not a reason to
    # loop for ever
    if count * least_bytes > len(cursor.data) - cursor.at:
        raise _Malformed(f"claims {count} {what} at byte {cursor.at}, more than the rest of the file holds")
    return count


def _name(cursor: _Cursor, index: int) -> str:
    size = cursor.number("<u8", f"the length of name {index}")
    raw = cursor.take(size, f"name {index}")
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError:
        raise _Malformed(f"name {index} at byte {cursor.at - size} is not UTF-8") from None


def _array(cursor: _Cursor, index: int) -> np.ndarray:
    what = f"array {index}"
    start = cursor.at
    magic = cursor.number("<u4", f"the magic of {what}")
    version = ARRAY_MAGICS.get(magic)
    if version is None:
        raise _Malformed(f"{what} at byte {start} has magic {magic:#x}, not one of MXNet's arrays (V1-V3)")
    if version >= 2:
        storage = cursor.number("<i4", f"the storage type of {what}")
        if storage != 0:
            kind = STORAGE_KINDS.get(storage, f"unknown storage type {storage}")
            raise _Unsupported(f"{what} is {kind}, not dense; save it dense (tostype('default')) and import that")
    ndim = cursor.number("<i4", f"the ndim of {what}")
    if ndim < -1 or ndim > 32:
        raise _Malformed(f"{what} at byte {start} has {ndim} dimensions")
    shape = tuple(int(d) for d in np.frombuffer(cursor.take(8 * max(ndim, 0), f"the shape of {what}"), "<i8"))
    if any(d < 0 for d in shape):
        raise _Malformed(f"{what} has shape {list(shape)} with an unknown dimension")
    if ndim == -1 or (ndim == 0 and version < 3):  # an empty (none) array: nothing follows its shape
        return np.zeros((0,), dtype=np.float32)
    cursor.number("<i4", f"the device type of {what}")
    cursor.number("<i4", f"the device id of {what}")
    flag = cursor.number("<i4", f"the dtype of {what}")
    if flag not in DTYPES:
        raise _Unsupported(f"{what} has dtype flag {flag} (12 is bfloat16), which numpy cannot hold; save it cast to "
                           f"float32 and import that")  # fmt: skip
    dtype = np.dtype(DTYPES[flag]).newbyteorder("<")
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return np.frombuffer(cursor.take(size, f"the data of {what}"), dtype=dtype).reshape(shape).astype(dtype.type)
