"""Random but well-scaled weights for a reference SlowFast network, shared by the reference scripts
(pyslowfast_reference.py, pytorchvideo_reference.py) that run inside the reference venvs: torch only.

A freshly built network compares badly: its BatchNorms are the identity (gamma 1, beta 0, mean 0, var 1) and the
last one of each block may start at zero, so a mix-up of two BatchNorm tensors, or of a block with its neighbour,
would not show. Here every BatchNorm gets its own gamma and beta, running statistics measured on the input itself
(one forward in train mode, so activations stay of order one through 100 blocks) then perturbed, and the classifier
weights of the size that gives logits of order one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def randomise(model: nn.Module, forward: Callable[[], object], classifier: nn.Linear, seed: int = 0) -> None:
    """Give ``model`` the weights described above; ``forward`` runs it once on the test's input."""
    gen = torch.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm3d)]
    with torch.no_grad():
        for bn in norms:
            bn.weight.copy_(torch.rand(bn.num_features, generator=gen) + 0.5)
            bn.bias.copy_(torch.randn(bn.num_features, generator=gen) * 0.2)
            bn.reset_running_stats()
            bn.momentum = None  # a cumulative average: after one batch, that batch's statistics
        model.train()
        forward()
        for bn in norms:
            bn.running_mean.add_(torch.randn(bn.num_features, generator=gen) * 0.1 * bn.running_var.sqrt())
            bn.running_var.mul_(torch.rand(bn.num_features, generator=gen) * 0.6 + 0.7)
            bn.momentum = 0.1
        classifier.weight.copy_(torch.randn(classifier.weight.shape, generator=gen) / classifier.in_features**0.5)
        classifier.bias.copy_(torch.randn(classifier.bias.shape, generator=gen) * 0.1)
    model.eval()
