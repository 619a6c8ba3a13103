"""The CIFAR-10 data tests' fixture: small_cifar, a small synthetic set made per module."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def small_cifar(tmp_path_factory) -> Path:
    """A synthetic cifar-10-batches-py folder (batches/: 60 train, 20 val images) with lists/ from index_cifar."""
    from cifar_helpers import NUM_TRAIN, NUM_VAL

    from clipflow.data.cifar.index import index_cifar
    from clipflow.data.cifar.synthetic import make_synthetic_cifar

    root = tmp_path_factory.mktemp("cifar")
    make_synthetic_cifar(root / "batches", NUM_TRAIN, NUM_VAL, seed=5)
    index_cifar(root / "batches", root / "lists")
    return root
