"""2-bit gradient compression with error feedback, as MXNet defines it (worker -> server only).

Each worker keeps a float32 residual per key (starting at 0). For a push of
gradient ``g`` with threshold ``t`` (a float32, default 0.5), element by element::

    r += g
    if r >= t:    send +t, r -= t
    elif r <= -t: send -t, r += t
    else:         send 0

The sent values are 2-bit codes, ``0b11`` = +t, ``0b10`` = -t, ``0b00`` = 0
(``0b01`` is never sent and decodes to 0), packed 16 to a 32-bit word with
MXNet's byte layout: element ``i`` of a part goes to word ``i // 16``, byte
``(i % 16) // 4`` of that word in memory order (the word's little-endian bytes),
and within the byte to bits ``7-6`` for ``i % 4 == 0``, ``5-4``, ``3-2``, ``1-0``
(the first element in the high bits). As a shift in the little-endian uint32
word: ``8 * ((i % 16) // 4) + 6 - 2 * (i % 4)``. The last word of a part is
padded with zero codes. A key split over several servers is compressed per part
(the residual is elementwise, so this only changes where the padding goes).

On the wire a compressed push carries one ``uint32`` array of
``ceil(size / 16)`` words and the header fields ``compression: "2bit"``,
``threshold`` (the float32 threshold as a JSON number) and ``size`` (elements);
the server dequantizes before summing. Pull replies stay float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

TWO_BIT = "2bit"
DEFAULT_THRESHOLD = 0.5
CODE_POS, CODE_NEG, CODE_ZERO = 0b11, 0b10, 0b00
_SHIFTS = np.array([6, 4, 2, 0], dtype=np.uint8)  # bits of elements 0..3 within a byte
_WORD = np.dtype("<u4")


def quantize_2bit(grad: np.ndarray, residual: np.ndarray, threshold: np.float32) -> np.ndarray:
    """Add ``grad`` to ``residual`` (in place), take out +-threshold where reached; return int8 signs."""
    t = np.float32(threshold)
    residual += grad
    pos = residual >= t
    neg = residual <= -t
    residual[pos] -= t
    residual[neg] += t
    signs = pos.astype(np.int8)
    signs -= neg
    return signs


def pack_2bit(signs: np.ndarray) -> np.ndarray:
    """Signs (-1, 0, +1) as 2-bit codes, 16 per uint32 word (see the module docstring for the layout)."""
    n = signs.size
    codes = np.zeros(-(-n // 16) * 16, dtype=np.uint8)
    codes[:n][signs.reshape(-1) > 0] = CODE_POS
    codes[:n][signs.reshape(-1) < 0] = CODE_NEG
    quads = codes.reshape(-1, 4) << _SHIFTS
    packed = np.bitwise_or.reduce(quads, axis=1).astype(np.uint8)
    return packed.view(_WORD).astype(np.uint32)


def unpack_2bit(words: np.ndarray, size: int) -> np.ndarray:
    """The 2-bit codes (uint8, 0..3) of the first ``size`` elements packed in ``words``."""
    if words.size != -(-size // 16):
        raise ValueError(f"{size} elements need {-(-size // 16)} words, got {words.size}")
    raw = np.asarray(words, dtype=np.uint32).astype(_WORD).view(np.uint8)
    return ((raw.reshape(-1, 1) >> _SHIFTS) & 0b11).reshape(-1)[:size]


def dequantize_2bit(words: np.ndarray, size: int, threshold: np.float32) -> np.ndarray:
    """Float32 values (+t, -t or 0) of ``size`` elements packed in ``words``."""
    t = np.float32(threshold)
    codes = unpack_2bit(words, size)
    out = np.zeros(size, dtype=np.float32)
    out[codes == CODE_POS] = t
    out[codes == CODE_NEG] = -t
    return out


def check_threshold(value: Any) -> np.float32:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"the 2bit threshold must be a number, got {value!r}")
    t = np.float32(value)
    if not (math.isfinite(float(t)) and t > 0):
        raise ValueError(f"the 2bit threshold must be a finite number > 0, got {value!r}")
    return t


class TwoBitCompression:
    """A worker's compressor: residuals per key, one compress call per pushed part."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD) -> None:
        self.threshold = check_threshold(threshold)
        self.residuals: dict[int, np.ndarray] = {}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TwoBitCompression:
        """MXNet's ``set_gradient_compression`` argument: ``{"type": "2bit", "threshold": 0.5}``."""
        params = dict(params)
        kind = str(params.pop("type", "")).lower()
        if kind != TWO_BIT:
            raise ValueError(f"unknown gradient compression type {kind!r}; supported: {TWO_BIT}")
        threshold = params.pop("threshold", DEFAULT_THRESHOLD)
        if params:
            raise ValueError(f"2bit compression does not take {', '.join(sorted(params))}")
        return cls(threshold)

    def compress(self, key: int, numel: int, start: int, part: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Words and header fields for elements ``start:start+part.size`` of ``key`` (``numel`` in all)."""
        residual = self.residuals.get(key)
        if residual is None or residual.size != numel:
            residual = self.residuals[key] = np.zeros(numel, dtype=np.float32)
        signs = quantize_2bit(part.reshape(-1), residual[start : start + part.size], self.threshold)
        fields = {"compression": TWO_BIT, "threshold": float(self.threshold), "size": int(part.size)}
        return pack_2bit(signs), fields


def decompress(fields: Mapping[str, Any], words: np.ndarray, size: int) -> np.ndarray:
    """Server side: the float32 gradient a compressed push stands for; ValueError if malformed."""
    kind = fields.get("compression")
    if kind != TWO_BIT:
        raise ValueError(f"unknown gradient compression {kind!r}")
    if fields.get("size") != size:
        raise ValueError(f"compressed push of {fields.get('size')!r} elements, the stored value has {size}")
    if words.dtype != np.uint32 or words.ndim != 1:
        raise ValueError(f"a 2bit push needs one 1-D uint32 array, got {words.dtype} {words.shape}")
    return dequantize_2bit(words, size, check_threshold(fields.get("threshold")))
