"""Learning-rate schedules as GluonCV defines them, per iteration, and the linear scaling rule."""

from __future__ import annotations

import math
from dataclasses import dataclass


def scaled_lr(base_lr: float, base_batch: int, global_batch: int) -> float:
    """Linear scaling rule (Goyal et al., 2017): the learning rate grows with the global batch."""
    return base_lr * global_batch / base_batch


@dataclass(frozen=True)
class Schedule:
    """Linear warm-up from `warmup_lr` to `lr` over `warmup_epochs`, then cosine, step or poly to the end."""

    lr: float
    epochs: int
    iters_per_epoch: int
    mode: str = "cosine"
    warmup_epochs: float = 0.0
    warmup_lr: float = 0.0
    lr_decay: float = 0.1
    lr_decay_epoch: tuple[int, ...] = ()
    power: float = 2.0
    target_lr: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in ("cosine", "step", "poly"):
            raise ValueError(f"unknown lr_mode {self.mode!r}; use cosine, step or poly")

    def __call__(self, iteration: int) -> float:
        """The learning rate of 0-based `iteration` (counted over all epochs)."""
        warmup = int(round(self.warmup_epochs * self.iters_per_epoch))
        if iteration < warmup:
            return self.warmup_lr + (self.lr - self.warmup_lr) * iteration / warmup
        total = self.epochs * self.iters_per_epoch - warmup
        progress = min(max(iteration - warmup, 0) / max(total, 1), 1.0)
        if self.mode == "cosine":
            return self.target_lr + (self.lr - self.target_lr) * (1 + math.cos(math.pi * progress)) / 2
        if self.mode == "poly":
            return self.target_lr + (self.lr - self.target_lr) * (1 - progress) ** self.power
        epoch = iteration / self.iters_per_epoch
        return self.lr * self.lr_decay ** sum(1 for e in self.lr_decay_epoch if epoch >= e)
