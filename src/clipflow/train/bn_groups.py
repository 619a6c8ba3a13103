"""BatchNorm over groups of a worker's batch (multigrid's fixed BatchNorm size: clipflow.train.multigrid).

A multigrid stage trains B times the recipe's clips per worker; the paper keeps BatchNorm's statistics over a fixed
number of clips by normalising the batch in ``splits`` groups (PySlowFast's SubBatchNorm3d). Clip i of N is in
group i % splits, as PySlowFast's view of (N, C, ...) as (N / splits, C x splits, ...) groups them: each group is
normalised by its own mean and variance, then scaled and shifted by the layer's one weight and bias.

The running statistics. PySlowFast keeps a running mean and variance per group and merges them into the plain
layer's before validation and saving (the mean of the group means; the mean of the group variances plus the
variance of the group means). Here the layer's own running statistics take each step's merged statistics at its
momentum: the running mean is the same number (an average of averages is linear); the running variance merges each
step's groups rather than their running values. Nothing but the layer's own buffers changes, so a checkpoint inside
a stage holds all of BatchNorm's state and a resumed run goes on to the unbroken run's weights, and validation,
precise BN and saving see plain BatchNorm.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from clipflow.errors import ClipflowError


class BatchNormGroups:
    """Every BatchNorm layer of ``model``; :meth:`use` sets how many groups their training batches are normalised
    in (1: the layer's own forward)."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        self.splits = 1

    def use(self, splits: int) -> None:
        if splits == self.splits:
            return
        for layer in self.layers:
            if splits == 1:
                del layer.forward  # the class's own again
            else:
                layer.forward = _GroupedForward(layer, splits)
        self.splits = splits


class _GroupedForward:
    """A layer's forward in ``splits`` groups while it trains (its own forward otherwise)."""

    def __init__(self, layer: nn.modules.batchnorm._BatchNorm, splits: int) -> None:
        self.layer, self.splits = layer, splits

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        layer, n = self.layer, self.splits
        if not layer.training:
            return type(layer).forward(layer, x)
        count, channels = x.shape[0], x.shape[1]
        if count % n:
            raise ClipflowError(f"BatchNorm in {n} groups got a batch of {count} clips, which does not divide")
        grouped = x.reshape(count // n, n * channels, *x.shape[2:])
        y = F.batch_norm(grouped, None, None, None, None, True, 0.0, layer.eps).reshape(x.shape)
        shape = (1, channels) + (1,) * (x.dim() - 2)
        if layer.affine:
            y = y * layer.weight.view(shape) + layer.bias.view(shape)
        if layer.track_running_stats:
            self._track(grouped.detach(), channels)
        return y

    def _track(self, grouped: torch.Tensor, channels: int) -> None:
        layer, n = self.layer, self.splits
        dims = [0, *range(2, grouped.dim())]
        with torch.no_grad():
            var, mean = torch.var_mean(grouped, dim=dims, correction=1)  # unbiased, as BatchNorm's running var
            mean, var = mean.view(n, channels), var.view(n, channels)
            merged_mean = mean.mean(0)
            merged_var = var.mean(0) + ((mean - merged_mean) ** 2).mean(0)
            layer.num_batches_tracked += 1
            momentum = layer.momentum if layer.momentum is not None else 1.0 / float(layer.num_batches_tracked)
            layer.running_mean.mul_(1 - momentum).add_(merged_mean, alpha=momentum)
            layer.running_var.mul_(1 - momentum).add_(merged_var, alpha=momentum)
