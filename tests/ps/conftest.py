"""The parameter-server tests' fixture: make_cluster (the processes it starts are in ps_cluster_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ps_cluster_helpers import Cluster


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Makes parameter-server clusters of real processes in ``tmp_path`` (test_ps, test_transport, test_shm, ...);
    kills what they left running at the end of the test."""
    from ps_cluster_helpers import Cluster

    clusters: list[Cluster] = []

    def make(num_server: int, num_worker: int, **env: str) -> Cluster:
        cluster = Cluster(tmp_path, num_server, num_worker, **env)
        clusters.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.kill_all()
