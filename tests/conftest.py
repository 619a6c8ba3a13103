"""Shared fixtures and hooks.

Fixtures that tests of several folders use: a small synthetic video set made once per test session; a CIFAR-format
set made per module (cifar, for the training and evaluation runs); the session's Slurm cluster; a small disk (a 64 KiB
tmpfs, for the full-disk tests). A fixture of one
folder lives in that folder's conftest.py (tests/data/cifar: small_cifar; tests/launch: mx_python; tests/ps:
make_cluster). Plain helpers live in tests/helpers.py and the other *_helpers modules (a folder's own beside its
tests), never here: test modules import those, never a conftest (tests/test_suite.py checks).

tests/ mirrors src/clipflow/: a folder per package, test_<module>.py for a module (pyproject.toml's pythonpath lists
the folders whose helper modules the tests import by their plain names).

Hooks: ``--order`` runs the collected tests in another order, to show a test that depends on which ran before
it: ``--order reverse``, or ``--order shuffle:SEED`` (the modules in a random order, then the tests inside each;
the same SEED, the same order). ``--order shuffle`` picks a seed and shows it in the header. The tests of a module
stay together, so a module-scoped fixture is still made once.

Side by side (pytest-xdist, ``make test`` runs ``-n 3 --dist loadscope``): three workers share the two cores, so
one worker's waits (Slurm, sshd hosts, Snakemake, training processes) are another's CPU; the suite's time is then
bounded by its CPU time, which each test's ``cpu_s`` (below) shows. Each module runs whole
on one worker, so its module-scoped fixtures are made once (xdist's ``loadgroup`` would put tests of several
modules together, but it marks a group in the test's node id, which pytest 9 no longer takes: it ran as ``load``,
test by test, and made a module's finished run once on every worker). A worker makes the Slurm cluster once for
the Slurm modules it runs. In the default order the modules of the longest kinds come first, so no long one starts
last; a shuffle's seed is chosen once and handed to every worker.
"""

from __future__ import annotations

import os
import random
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO

os.environ.setdefault("CLIPFLOW_NO_PROGRESS", "1")
ORDER = pytest.StashKey[tuple[str, int | None]]()  # --order: ("default" | "reverse" | "shuffle", the shuffle's seed)
ORDER_INPUT = "clipflow_order"  # the controller's resolved --order, handed to each xdist worker
# Modules of the kinds that take longest, started first in the default order (the rest keep their order): those
# on the Slurm cluster, then those that run Snakemake, then those on sshd hosts, then the other long ones (marked
# long: a minute or more in CI's runs), so that the suite ends on short modules.
FIRST = ("slurm", "workflow", "hosts", "long")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--order",
        default="default",
        metavar="ORDER",
        help="run the tests in another order: 'reverse', or 'shuffle:SEED' (modules shuffled, then the tests in each; "
        "'shuffle' alone picks a seed and shows it); default: as collected",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = getattr(config, "workerinput", {}).get(ORDER_INPUT) or config.getoption("order")
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


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist: every worker orders the tests as the controller does (one shuffle seed for all)."""
    kind, seed = node.config.stash[ORDER]
    node.workerinput[ORDER_INPUT] = kind if seed is None else f"{kind}:{seed}"


def module_ranks(items: list[pytest.Item]) -> dict[Path, int]:
    """Where each module starts in the default order under xdist: the modules of the longest kinds first (FIRST:
    a module with a test marked ``slurm``, then ``workflow``, then ``hosts``, then ``long``), then the rest."""
    ranks: dict[Path, int] = {}
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        rank = next((rank for rank, name in enumerate(FIRST) if name in marks), len(FIRST))
        ranks[item.path] = min(rank, ranks.get(item.path, rank))
    return ranks


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorders the tests for ``--order`` (after pytest's own ordering and any deselection)."""
    kind, seed = config.stash[ORDER]
    if kind == "default" and hasattr(config, "workerinput"):
        ranks = module_ranks(items)
        items.sort(key=lambda item: ranks[item.path])  # stable: a module's tests keep their order
    elif kind == "reverse":
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


CPU_START = pytest.StashKey[float]()
CPU_TOTALS: list[tuple[float, str]] = []  # (CPU seconds, test id); under xdist every worker's reports come here


def cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped (the clipflow commands, Snakemake runs and roles
    a test starts), user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[CPU_START] = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each test's CPU seconds, setup to teardown, as its report's property ``cpu_s`` (the junit XML has it too):
    on two cores the suite's wall time is bounded by its CPU time, which the durations alone do not show. Processes
    that daemons a fixture started (sshd, slurmd) reap are not counted."""
    if call.when == "teardown" and CPU_START in item.stash:
        item.user_properties.append(("cpu_s", round(cpu_seconds() - item.stash[CPU_START], 2)))
    yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        spent = dict(report.user_properties).get("cpu_s")
        if spent is not None:
            CPU_TOTALS.append((float(spent), report.nodeid))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The 30 tests that took the most CPU, beside pytest's 30 slowest (``--durations``), and the sum."""
    if not CPU_TOTALS or hasattr(config, "workerinput"):
        return
    terminalreporter.write_sep("=", f"most CPU: {sum(s for s, _ in CPU_TOTALS):.0f} s in all tests")
    for spent, nodeid in sorted(CPU_TOTALS, reverse=True)[:30]:
        terminalreporter.write_line(f"{spent:8.1f}s cpu  {nodeid}")


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session() -> Iterator[None]:
    """Every process the suite starts carries one marker in its environment; at the session's end (after every
    other fixture's teardown) none may be left: those found are killed and named in an error."""
    from leftover_helpers import MARKER, end_leftovers

    token = f"{os.getpid()}-{time.time_ns()}"
    os.environ[MARKER] = token
    yield
    left = end_leftovers(token)
    assert not left, "processes outlived the tests that started them (now killed):\n" + "\n".join(
        f"{pid} {cmd}" for pid, cmd in sorted(left.items())
    )


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
def cifar(tmp_path_factory):
    """200 train and 50 val synthetic images in CIFAR-10's format, indexed, the train list split over 2 workers.

    Per module, like small_cifar: the modules that use it (train/test_images, evaluate/test_evaluate) only read it,
    and it takes a second to make, so each module gets its own and no module sees what another did to it."""
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
def small_disk(tmp_path) -> Iterator[Path]:
    """An empty 64 KiB tmpfs of the test's own, unmounted after it; skips, with the reason, unless root
    (tests/disk_helpers.py)."""
    from disk_helpers import small_tmpfs

    with small_tmpfs(tmp_path / "small-disk") as where:
        yield where


@pytest.fixture(scope="session")
def slurm_cluster_session(tmp_path_factory) -> Iterator:
    """A real Slurm cluster (munged, slurmctld, a slurmd on each of three network-namespace hosts), shared by every
    test that runs jobs; skips, naming what is missing, unless root with Slurm's programs (tests/slurm_cluster.py).
    Tests take it through ``slurm`` (or a module fixture through ``slurm_module``), which end what the test left."""
    from slurm_cluster import slurm_cluster

    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster_session) -> Iterator:
    """The session's Slurm cluster for one test. Each test must leave it quiet (no job queued or running, no process
    on a node but its slurmd) and checks that itself; whatever it left anyway, pass or fail, is cancelled and killed
    when it ends, so no job of one test trains during the next."""
    yield slurm_cluster_session
    slurm_cluster_session.clear()


@pytest.fixture(scope="module")
def slurm_module(slurm_cluster_session) -> Iterator:
    """The session's Slurm cluster for a module's shared fixture; what the module left is ended with the module."""
    yield slurm_cluster_session
    slurm_cluster_session.clear()
