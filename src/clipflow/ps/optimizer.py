"""The optimizer both workers and servers run: SGD with momentum, Nesterov and weight decay.

One class, :class:`SGD`, on numpy float32 arrays (servers do not import torch).
Workers call it when ``update_on_kvstore`` is false (servers only sum, every
worker updates its own weights); servers call it through
:class:`clipflow.ps.store.OptimizerUpdater` when it is true. Same code, same
bits.

The update of one key, with ``g`` the pushed (merged) gradient, as
``torch.optim.SGD`` with dampening 0 does it, plus MXNet's ``rescale_grad``::

    g = rescale_grad * g                       # e.g. 1/num_workers: the merged sum becomes a mean
    g = g + wd * wd_mult[key] * w              # weight decay
    b = momentum * b + g                       # momentum buffer, starts at 0 (so b = g on step 1)
    d = g + momentum * b if nesterov else b    # (d = g when momentum is 0: no buffer is kept)
    w = w - lr * lr_mult[key] * d

``lr`` is the optimizer's ``learning_rate`` unless a caller passes one per update
(the KVStore carries each worker's current learning rate in its push headers).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

OPTIMIZERS = ("sgd",)


class SGD:
    """SGD with momentum/Nesterov/weight decay; per-key state is the momentum buffer."""

    name = "sgd"

    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        wd: float = 0.0,
        nesterov: bool = False,
        rescale_grad: float = 1.0,
    ) -> None:
        self.learning_rate = _number("learning_rate", learning_rate)
        self.momentum = _number("momentum", momentum)
        self.wd = _number("wd", wd)
        self.rescale_grad = _number("rescale_grad", rescale_grad, positive=True)
        if not isinstance(nesterov, bool):
            raise ValueError(f"nesterov must be true or false, got {nesterov!r}")
        if nesterov and self.momentum == 0:
            raise ValueError("nesterov needs a momentum > 0")
        self.nesterov = nesterov
        self.wd_mult: dict[int, float] = {}
        self.lr_mult: dict[int, float] = {}
        self.states: dict[Hashable, np.ndarray] = {}

    # -- configuration (what travels to the servers) ------------------------------------------

    def config(self) -> dict[str, Any]:
        """JSON-able hyperparameters; :meth:`from_config` rebuilds an equal optimizer."""
        return {
            "name": self.name,
            "learning_rate": self.learning_rate,
            "momentum": self.momentum,
            "wd": self.wd,
            "nesterov": self.nesterov,
            "rescale_grad": self.rescale_grad,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SGD:
        return create(**config)

    def reconfigure(self, other: SGD) -> None:
        """Take ``other``'s hyperparameters, keeping this optimizer's states and multipliers."""
        self.learning_rate, self.momentum, self.wd = other.learning_rate, other.momentum, other.wd
        self.nesterov, self.rescale_grad = other.nesterov, other.rescale_grad

    def set_wd_mult(self, mults: Mapping[int, float]) -> None:
        self.wd_mult.update({int(k): _number(f"wd_mult of key {k}", v) for k, v in mults.items()})

    def set_lr_mult(self, mults: Mapping[int, float]) -> None:
        self.lr_mult.update({int(k): _number(f"lr_mult of key {k}", v) for k, v in mults.items()})

    # -- the update ---------------------------------------------------------------------------

    def update(
        self, key: int, weight: np.ndarray, grad: np.ndarray, lr: float | None = None, state: Hashable = None
    ) -> None:
        """Update ``weight`` (float32, written in place) with ``grad`` for ``key``; the momentum buffer is
        ``state``'s (default: the key's; a server keeps one per piece of a split key)."""
        state = key if state is None else state
        if weight.dtype != np.float32 or grad.dtype != np.float32:
            raise ValueError(f"key {key}: the optimizer works on float32, got {weight.dtype} and {grad.dtype}")
        if weight.shape != grad.shape:
            raise ValueError(f"key {key}: weight shape {weight.shape} but gradient shape {grad.shape}")
        lr = self.learning_rate if lr is None else _number("learning rate", lr)
        f32 = np.float32
        g = grad * f32(self.rescale_grad) if self.rescale_grad != 1.0 else grad.copy()
        wd = self.wd * self.wd_mult.get(key, 1.0)
        if wd != 0.0:
            g += f32(wd) * weight
        if self.momentum != 0.0:
            buf = self.states.get(state)
            if buf is None or buf.shape != weight.shape:
                buf = self.states[state] = np.zeros_like(weight)
            buf *= f32(self.momentum)
            buf += g
            if self.nesterov:
                g += f32(self.momentum) * buf
            else:
                g = buf
        weight -= f32(lr * self.lr_mult.get(key, 1.0)) * g

    # -- state ----------------------------------------------------------------------------------

    def get_states(self) -> dict[Hashable, np.ndarray]:
        """The momentum buffer of every key (or piece) updated so far (copies)."""
        return {k: v.copy() for k, v in self.states.items()}

    def set_states(self, states: Mapping[Hashable, np.ndarray]) -> None:
        for k, v in states.items():
            state = k if isinstance(k, tuple) else int(k)  # type: ignore[call-overload]
            self.states[state] = np.array(v, dtype=np.float32, copy=True).reshape(-1)


def create(name: str = "sgd", **kwargs: Any) -> SGD:
    """Build an optimizer by name (MXNet's ``mx.optimizer.create``); only "sgd" exists."""
    if str(name).lower() != "sgd":
        raise ValueError(f"unknown optimizer {name!r}; the parameter server supports {', '.join(OPTIMIZERS)}")
    unknown = set(kwargs) - {"learning_rate", "momentum", "wd", "nesterov", "rescale_grad"}
    if unknown:
        raise ValueError(f"sgd does not take {', '.join(sorted(unknown))}")
    return SGD(**kwargs)


def _number(what: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return value


class KeySet:
    """Which keys a setting covers: every key (``None``), or a union of ``[start, stop)`` ranges.

    Built from ``None``, a ``range`` with step 1 or any iterable of ints; sent on the wire as
    ``null`` or a list of ``[start, stop]`` pairs.
    """

    def __init__(self, ranges: list[tuple[int, int]] | None) -> None:
        self.ranges = ranges

    @classmethod
    def of(cls, keys: Any) -> KeySet:
        if keys is None:
            return cls(None)
        if isinstance(keys, range) and keys.step == 1:
            return cls([(keys.start, keys.stop)] if keys.stop > keys.start else [])
        ints = sorted({int(k) for k in keys})
        ranges: list[tuple[int, int]] = []
        for k in ints:
            if ranges and ranges[-1][1] == k:
                ranges[-1] = (ranges[-1][0], k + 1)
            else:
                ranges.append((k, k + 1))
        return cls(ranges)

    @classmethod
    def from_wire(cls, value: Any) -> KeySet:
        if value is None:
            return cls(None)
        try:
            return cls([(int(a), int(b)) for a, b in value])
        except (TypeError, ValueError):
            raise ValueError(f"bad key ranges {value!r}") from None

    def to_wire(self) -> list[list[int]] | None:
        return None if self.ranges is None else [[a, b] for a, b in self.ranges]

    def __contains__(self, key: object) -> bool:
        if self.ranges is None:
            return True
        return isinstance(key, int) and any(a <= key < b for a, b in self.ranges)
