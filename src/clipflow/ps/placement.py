"""Which server holds which key (or which slice of a big key).

Arrays with more elements than MXNET_KVSTORE_BIGARRAY_BOUND are split into
contiguous slices of the flattened array, one per server, sizes differing by at
most one; each slice is cut again into pieces of at most ``piece`` elements
(CLIPFLOW_PS_PIECE), so a server can sum and send back one piece while the next
ones are still arriving. Every piece is a :class:`Part` of its own. Smaller arrays
go whole to the least-loaded server (load = elements placed so far), ties broken
by a stable hash of the key, so every worker that initialises the same keys in the
same order computes the same placement. Python's ``hash()`` is salted per process
and is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Part:
    """Elements ``start:stop`` of a key's flattened array live on ``server``."""

    server: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def split_sizes(numel: int, num_servers: int) -> list[int]:
    """Sizes of ``num_servers`` contiguous slices covering ``numel`` elements, larger ones first."""
    if num_servers < 1 or numel < 0:
        raise ValueError(f"cannot split {numel} elements over {num_servers} servers")
    base, extra = divmod(numel, num_servers)
    return [base + 1 if i < extra else base for i in range(num_servers)]


def stable_hash(key: int) -> int:
    """splitmix64 of the key: the same in every process and on every machine."""
    z = (key + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Placement:
    """Remembers where each initialised key lives; deterministic given the order of :meth:`place` calls."""

    def __init__(self, num_servers: int, bound: int, piece: int = 0) -> None:
        if num_servers < 1 or bound < 1 or piece < 0:
            raise ValueError(f"need num_servers >= 1, bound >= 1, piece >= 0; got {num_servers}, {bound}, {piece}")
        self.num_servers = num_servers
        self.bound = bound
        self.piece = piece  # 0: one piece per server
        self.loads = [0] * num_servers
        self._parts: dict[int, tuple[Part, ...]] = {}

    def place(self, key: int, numel: int) -> tuple[Part, ...]:
        """Parts for ``key``; the first call decides, later calls must agree on ``numel``."""
        known = self._parts.get(key)
        if known is not None:
            placed = known[-1].stop if known else 0
            if placed != numel:
                raise ValueError(f"key {key} was placed with {placed} elements, now has {numel}")
            return known
        if numel > self.bound:
            parts = []
            start = 0
            for server, size in enumerate(split_sizes(numel, self.num_servers)):
                pieces = -(-size // self.piece) if self.piece else 1
                for piece in split_sizes(size, pieces) if size else []:
                    parts.append(Part(server, start, start + piece))
                    start += piece
            placed_parts = tuple(parts)
        else:
            first = stable_hash(key) % self.num_servers
            order = [(first + i) % self.num_servers for i in range(self.num_servers)]
            server = min(order, key=lambda s: self.loads[s])
            placed_parts = (Part(server, 0, numel),)
        for part in placed_parts:
            self.loads[part.server] += part.size
        self._parts[key] = placed_parts
        return placed_parts

    def parts(self, key: int) -> tuple[Part, ...]:
        """Parts of a key already placed; KeyError otherwise."""
        return self._parts[key]

    def __contains__(self, key: object) -> bool:
        return key in self._parts
