"""The optimizers both workers and servers run: SGD (momentum, Nesterov, weight decay) and Adam.

Classes on numpy float32 arrays (servers do not import torch). Workers call them
when ``update_on_kvstore`` is false (servers only sum, every worker updates its own
weights); servers call them through :class:`clipflow.ps.store.OptimizerUpdater`
when it is true. Same code, same bits.

Both start from the pushed (merged) gradient ``g`` of one key, with MXNet's
``rescale_grad`` and weight decay::

    g = rescale_grad * g                       # e.g. 1/num_workers: the merged sum becomes a mean
    g = g + wd * wd_mult[key] * w              # weight decay

:class:`SGD`, as ``torch.optim.SGD`` with dampening 0::

    b = momentum * b + g                       # momentum buffer, starts at 0 (so b = g on step 1)
    d = g + momentum * b if nesterov else b    # (d = g when momentum is 0: no buffer is kept)
    w = w - lr * lr_mult[key] * d

:class:`Adam`, as MXNet's (``mx.optimizer.Adam``: the bias correction folded into the
learning rate, epsilon outside the square root's correction), step ``t`` counted per key::

    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    w = w - lr * lr_mult[key] * sqrt(1 - beta2 ** t) / (1 - beta1 ** t) * m / (sqrt(v) + epsilon)

A key's state is one float32 vector of :meth:`Optimizer.state_size` values (SGD: the
momentum buffer; Adam: m, v and t), so checkpoints and the servers' GET_STATES /
SET_STATES carry either without knowing which. ``lr`` is
the optimizer's ``learning_rate`` unless a caller passes one per update (the KVStore
carries each worker's current learning rate in its push headers).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any, ClassVar

import numpy as np


class Optimizer:
    """What SGD and Adam share: hyperparameters that travel as a config, per-key multipliers, states."""

    name: ClassVar[str]
    HYPER: ClassVar[tuple[str, ...]]  # the hyperparameters besides learning_rate, wd and rescale_grad

    def __init__(self, learning_rate: float = 0.01, wd: float = 0.0, rescale_grad: float = 1.0) -> None:
        self.learning_rate = _number("learning_rate", learning_rate)
        self.wd = _number("wd", wd)
        self.rescale_grad = _number("rescale_grad", rescale_grad, positive=True)
        self.wd_mult: dict[int, float] = {}
        self.lr_mult: dict[int, float] = {}
        self.states: dict[Hashable, np.ndarray] = {}

    # -- configuration (what travels to the servers) ------------------------------------------

    def config(self) -> dict[str, Any]:
        """JSON-able hyperparameters; :meth:`from_config` rebuilds an equal optimizer."""
        names = ("learning_rate", "wd", "rescale_grad", *self.HYPER)
        return {"name": self.name, **{n: getattr(self, n) for n in names}}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Optimizer:
        return create(**config)

    def reconfigure(self, other: Optimizer) -> None:
        """Take ``other``'s hyperparameters, keeping this optimizer's states and multipliers."""
        if type(other) is not type(self):
            raise ValueError(f"cannot change the optimizer from {self.name} to {other.name}: its states differ")
        for n in ("learning_rate", "wd", "rescale_grad", *self.HYPER):
            setattr(self, n, getattr(other, n))

    def set_wd_mult(self, mults: Mapping[int, float]) -> None:
        self.wd_mult.update({int(k): _number(f"wd_mult of key {k}", v) for k, v in mults.items()})

    def set_lr_mult(self, mults: Mapping[int, float]) -> None:
        self.lr_mult.update({int(k): _number(f"lr_mult of key {k}", v) for k, v in mults.items()})

    # -- the update ---------------------------------------------------------------------------

    def update(
        self, key: int, weight: np.ndarray, grad: np.ndarray, lr: float | None = None, state: Hashable = None
    ) -> None:
        """Update ``weight`` (float32, written in place) with ``grad`` for ``key``; the state is ``state``'s
        (default: the key's; a server keeps one per piece of a split key)."""
        state = key if state is None else state
        if weight.dtype != np.float32 or grad.dtype != np.float32:
            raise ValueError(f"key {key}: the optimizer works on float32, got {weight.dtype} and {grad.dtype}")
        if weight.shape != grad.shape:
            raise ValueError(f"key {key}: weight shape {weight.shape} but gradient shape {grad.shape}")
        lr = self.learning_rate if lr is None else _number("learning rate", lr)
        g = grad * np.float32(self.rescale_grad) if self.rescale_grad != 1.0 else grad.copy()
        wd = self.wd * self.wd_mult.get(key, 1.0)
        if wd != 0.0:
            g += np.float32(wd) * weight
        self._step(state, weight, g, lr * self.lr_mult.get(key, 1.0))

    def _step(self, state: Hashable, weight: np.ndarray, g: np.ndarray, lr: float) -> None:
        raise NotImplementedError

    def state_size(self, numel: int) -> int:
        """How many float32 values the state of a key (or piece) of ``numel`` weights holds (0: none)."""
        raise NotImplementedError

    def _state(self, state: Hashable, numel: int) -> np.ndarray:
        """The state vector of ``state`` for ``numel`` weights (zeros the first time)."""
        size = self.state_size(numel)
        buf = self.states.get(state)
        if buf is None:
            buf = self.states[state] = np.zeros(size, dtype=np.float32)
        elif buf.shape != (size,):
            raise ValueError(f"{self.name} state of {state} has {buf.size} values; {numel} weights need {size}")
        return buf

    # -- state ----------------------------------------------------------------------------------

    def get_states(self) -> dict[Hashable, np.ndarray]:
        """The state of every key (or piece) updated so far (copies)."""
        return {k: v.copy() for k, v in self.states.items()}

    def set_states(self, states: Mapping[Hashable, np.ndarray]) -> None:
        for k, v in states.items():
            state = k if isinstance(k, tuple) else int(k)  # type: ignore[call-overload]
            self.states[state] = np.array(v, dtype=np.float32, copy=True).reshape(-1)


class SGD(Optimizer):
    """SGD with momentum/Nesterov/weight decay; a key's state is its momentum buffer."""

    name = "sgd"
    HYPER = ("momentum", "nesterov")

    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        wd: float = 0.0,
        nesterov: bool = False,
        rescale_grad: float = 1.0,
    ) -> None:
        super().__init__(learning_rate, wd, rescale_grad)
        self.momentum = _number("momentum", momentum)
        if not isinstance(nesterov, bool):
            raise ValueError(f"nesterov must be true or false, got {nesterov!r}")
        if nesterov and self.momentum == 0:
            raise ValueError("nesterov needs a momentum > 0")
        self.nesterov = nesterov

    def state_size(self, numel: int) -> int:
        return numel if self.momentum != 0.0 else 0

    def _step(self, state: Hashable, weight: np.ndarray, g: np.ndarray, lr: float) -> None:
        if self.momentum != 0.0:
            f32 = np.float32
            buf = self._state(state, weight.size).reshape(weight.shape)
            buf *= f32(self.momentum)
            buf += g
            if self.nesterov:
                g += f32(self.momentum) * buf
            else:
                g = buf
        weight -= np.float32(lr) * g


class Adam(Optimizer):
    """MXNet's Adam; a key's state is m, v and the key's step count t, in one vector of 2 n + 1."""

    name = "adam"
    HYPER = ("beta1", "beta2", "epsilon")

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        wd: float = 0.0,
        rescale_grad: float = 1.0,
    ) -> None:
        super().__init__(learning_rate, wd, rescale_grad)
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= _number(name, value) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.epsilon = _number("epsilon", epsilon, positive=True)

    def state_size(self, numel: int) -> int:
        return 2 * numel + 1

    def _step(self, state: Hashable, weight: np.ndarray, g: np.ndarray, lr: float) -> None:
        n = weight.size
        buf = self._state(state, n)
        m, v = buf[:n].reshape(weight.shape), buf[n : 2 * n].reshape(weight.shape)
        buf[2 * n] += 1
        t = float(buf[2 * n])
        f32 = np.float32
        m *= f32(self.beta1)
        m += f32(1 - self.beta1) * g
        v *= f32(self.beta2)
        v += f32(1 - self.beta2) * g * g
        scaled = lr * math.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)
        weight -= f32(scaled) * m / (np.sqrt(v) + f32(self.epsilon))


OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "adam": Adam}


def create(name: str = "sgd", **kwargs: Any) -> Optimizer:
    """Build an optimizer by name (MXNet's ``mx.optimizer.create``): "sgd" or "adam"."""
    cls = OPTIMIZERS.get(str(name).lower())
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; the parameter server supports {', '.join(OPTIMIZERS)}")
    unknown = set(kwargs) - {"learning_rate", "wd", "rescale_grad", *cls.HYPER}
    if unknown:
        raise ValueError(f"{cls.name} does not take {', '.join(sorted(unknown))}")
    return cls(**kwargs)


def _number(what: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
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
