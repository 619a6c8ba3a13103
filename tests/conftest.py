"""Shared fixtures and hooks.

Fixtures: a small synthetic video set made once per test session; two CIFAR-format sets made per module
(small_cifar, and cifar for the training and evaluation runs); make_cluster for the parameter-server tests.
Plain helpers live in tests/helpers.py and the other *_helpers modules, never here: test modules import those,
never conftest (tests/test_suite.py checks).

Hooks: ``--order`` runs the collected tests in another order, to show a test that depends on which ran before
it: ``--order reverse``, or ``--order shuffle:SEED`` (the modules in a random order, then the tests inside each;
the same SEED, the same order). ``--order shuffle`` picks a seed and shows it in the header. The tests of a module
stay together, so a module-scoped fixture is still made once.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import REPO

if TYPE_CHECKING:
    from ps_cluster_helpers import Cluster

os.environ.setdefault("CLIPFLOW_NO_PROGRESS", "1")
ORDER = pytest.StashKey[tuple[str, int | None]]()  # --order: ("default" | "reverse" | "shuffle", the shuffle's seed)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--order",
        default="default",
        metavar="ORDER",
        help="run the tests in another order: 'reverse', or 'shuffle:SEED' (modules shuffled, then the tests in each; "
        "'shuffle' alone picks a seed and shows it); default: as collected",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("order")
    kind, colon, seed = value.partition(":")
    if value in ("default", "reverse"):
        config.stash[ORDER] = (value, None)
    elif kind == "shuffle" and not colon:
        config.stash[ORDER] = ("shuffle", random.SystemRandom().randrange(1_000_000))
    elif kind == "shuffle" and seed.isdigit():
        config.stash[ORDER] = ("shuffle", int(seed))
    else:
        raise pytest.UsageError(
            f"--order must be default, reverse, shuffle or shuffle:SEED (a whole number); got {value!r}"
        )


def pytest_report_header(config: pytest.Config) -> str | None:
    kind, seed = config.stash[ORDER]
    if kind == "default":
        return None
    return f"test order: {kind}" + ("" if seed is None else f":{seed} (again with --order shuffle:{seed})")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorders the tests for ``--order`` (after pytest's own ordering and any deselection)."""
    kind, seed = config.stash[ORDER]
    if kind == "reverse":
        items.reverse()
    elif kind == "shuffle":
        rng = random.Random(seed)
        modules: dict[Path, list[pytest.Item]] = {}
        for item in items:
            modules.setdefault(item.path, []).append(item)
        groups = list(modules.values())
        rng.shuffle(groups)
        for group in groups:
            rng.shuffle(group)
        items[:] = [item for group in groups for item in group]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_videos(tmp_path_factory) -> Path:
    """16 train and 8 val videos of the synthetic set, 24-40 frames each."""
    from clipflow.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("synthetic")
    generate(out, SyntheticSpec(num_train=16, num_val=8, min_frames=24, max_frames=40, short_side=64), workers=2)
    return out


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


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """200 train and 50 val synthetic images in CIFAR-10's format, indexed, the train list split over 2 workers.

    Per module, like small_cifar: the modules that use it (test_train_images, test_evaluate) only read it, and it
    takes a second to make, so each module gets its own and no module sees what another did to it."""
    from clipflow.data.cifar.index import index_cifar
    from clipflow.data.cifar.synthetic import make_synthetic_cifar
    from clipflow.data.listfile import read_list, write_list
    from clipflow.data.splits import split_entries

    root = tmp_path_factory.mktemp("cifar")
    make_synthetic_cifar(root / "batches", num_train=200, num_val=50, seed=0)
    index_cifar(root / "batches", root / "index")
    for rank, part in enumerate(split_entries(read_list(root / "index/train.lst"), 2, seed=0)):
        write_list(root / "splits" / f"worker{rank}.lst", part)
    return root


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Makes parameter-server clusters of real processes in ``tmp_path`` (test_ps, test_ps_transport, test_ps_shm);
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


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Iterator:
    """A real Slurm cluster (munged, slurmctld, a slurmd on each of three network-namespace hosts), shared by every
    test that runs jobs; skips, naming what is missing, unless root with Slurm's programs (tests/slurm_cluster.py).
    Each test must leave it quiet: no job queued or running, no process on a node but its slurmd."""
    from slurm_cluster import slurm_cluster

    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def mx_python() -> Path:
    """The Python of a virtual environment with MXNet 1.9.1 (tests/mxnet_env.py, built once and cached); skips,
    saying why, only where it cannot be built."""
    from mxnet_env import MxnetUnavailable, mxnet_python

    try:
        return mxnet_python()
    except MxnetUnavailable as exc:
        pytest.skip(f"no MXNet environment to run a real ps-lite job: {exc}")
