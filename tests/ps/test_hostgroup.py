"""Per-host aggregation (dist_sync_device) and the servers' fixed sum order, on real processes and sockets.

Two "hosts" on one machine: workers 0 and 1 advertise 127.0.0.1, workers 2 and 3 127.0.0.2 (both loopback), with
one server on each; see tests/ps/ps_hostgroup_helpers.py.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from ps_cluster_helpers import HB_TIMEOUT, Cluster
from ps_hostgroup_helpers import BOUND, start_two_hosts

from clipflow.errors import ABORTED
from clipflow.ps.node import Welcome, group_numbers
from clipflow.ps.store import KeyValueStore, Slot
from clipflow.ps.wire import Message, Op, WireError, decode, encode, shown


def _run_exact(
    make_cluster: Callable[..., Cluster], tmp: Path, mode: str, delayed: int | None = None, **env: str
) -> tuple[dict, list[dict]]:
    tmp.mkdir()
    cluster = make_cluster(2, 4, PYTEST_CLIPFLOW_DIR=str(tmp), MXNET_KVSTORE_BIGARRAY_BOUND=BOUND, **env)
    workers = start_two_hosts(cluster, "exact", mode, delayed)
    cluster.wait_ok()
    results = [torch.load(tmp / f"results-{r}.pt") for r in range(4)]
    return results[0], [w.facts() | {"stderr": w.stderr()} for w in workers] + [{"results": results}]


def test_one_push_per_host_and_exact_sums(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    device, facts = _run_exact(make_cluster, tmp_path / "device", "dist_sync_device")
    plain, plain_facts = _run_exact(make_cluster, tmp_path / "plain", "dist_sync")
    # every worker checked its results against (w0 + w1) + (w2 + w3), and the terms are such that order shows
    assert all(f["order_matters"] for f in facts[:4])
    # with aggregation each server heard only from the two hosts' leaders, once per key part per round: keys 0
    # and 1 live on one server each, key 2 is split over both; 6 rounds
    pushes = facts[0]["pushes"]
    assert [set(p) for p in pushes] == [{"0", "2"}, {"0", "2"}], pushes
    assert all(p["0"] == p["2"] for p in pushes)
    assert sum(p["0"] for p in pushes) == 6 * 4  # 4 key parts (key 0, key 1, two pieces of key 2) x 6 rounds
    assert [set(p) for p in plain_facts[0]["pushes"]] == [{"0", "1", "2", "3"}] * 2
    # the same bits with and without aggregation, on every worker
    for got in facts[4]["results"] + plain_facts[4]["results"]:
        assert got.keys() == plain.keys()
        assert all(torch.equal(got[k], plain[k]) for k in plain)
    assert all(torch.equal(device[k], plain[k]) for k in plain)


def test_without_shared_memory_device_modes_push_plainly_and_say_so_once(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    plain, facts = _run_exact(make_cluster, tmp_path / "noshm", "dist_sync_device", CLIPFLOW_PS_SHM="0")
    assert [set(p) for p in facts[0]["pushes"]] == [{"0", "1", "2", "3"}] * 2
    for rank, f in enumerate(facts[:4]):
        line = "mode dist_sync_device: no per-host aggregation (CLIPFLOW_PS_SHM=0); every worker pushes its own values"
        assert f["stderr"].count(line) == 1, f["stderr"]
        assert f["rank"] == rank  # and each checked its results against (w0 + w1) + (w2 + w3): the same order


def test_sum_order_does_not_follow_arrivals(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    first, _ = _run_exact(make_cluster, tmp_path / "first", "dist_sync")
    # worker 0's pushes now come last in every round: the server holds the others until it can add them in order
    late, _ = _run_exact(make_cluster, tmp_path / "late", "dist_sync", delayed=0)
    assert first.keys() == late.keys()
    assert all(torch.equal(first[k], late[k]) for k in first)


def test_a_killed_group_member_ends_the_job_naming_it(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster(2, 4)
    workers = start_two_hosts(cluster, "stall", "dist_sync_device")
    deadline = time.monotonic() + 60
    while not (tmp_path / "stalled").exists():
        assert time.monotonic() < deadline, workers[1].stderr()
        time.sleep(0.05)
    time.sleep(0.5)  # the others are in their pushpull, rank 0 waiting for rank 1's value
    workers[1].popen.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    others = [p for p in cluster.procs if p is not workers[1]]
    exits = cluster.wait_exits(others, HB_TIMEOUT + 30)
    assert all(rc == ABORTED for rc, _ in exits.values()), exits
    assert max(t for _, t in exits.values()) - killed < HB_TIMEOUT + 15
    for p in [workers[0], workers[2], workers[3]]:
        assert "worker 1" in p.stderr(), p.stderr()


def test_compression_with_aggregation_is_refused(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster(2, 4)
    workers = start_two_hosts(cluster, "compression", "dist_sync_device")
    cluster.wait_ok()
    for w in workers:
        refused = w.facts()["refused"]
        assert refused and "set_gradient_compression" in refused and "dist_sync_device" in refused, refused


def _push(key: int, rank: int, value: np.ndarray, seq: int, **fields: object) -> Message:
    # through the codec, as a server receives it (read-only arrays)
    return decode(
        [bytes(f) for f in encode(Message(Op.PUSH, {"key": key, "seq": seq, "rank": rank, **fields}, [value]))]
    )


def test_store_sums_in_the_group_order_whatever_the_arrival_order() -> None:
    """4 workers in host groups (0, 2) and (1, 3): every arrival order gives (w0 + w2) + (w1 + w3), bit for bit;
    a group's sum pushed by its leader (``ranks``) stands for both of its workers."""
    rng = np.random.default_rng(5)
    terms = [(rng.standard_normal(64) * 10.0 ** rng.integers(-7, 8, 64)).astype(np.float32) for _ in range(4)]
    want = (terms[0] + terms[2]) + (terms[1] + terms[3])
    assert not np.array_equal(want, ((terms[3] + terms[1]) + terms[0]) + terms[2])  # the order shows
    groups = Welcome(0, 1, 4, (), groups=(0, 1, 0, 1)).host_groups()
    assert groups == ((0, 2), (1, 3))
    for order in itertools.permutations(range(4)):
        store = KeyValueStore(0, 4, groups=groups)
        store.handle(b"w0", Message(Op.INIT, {"key": 1, "seq": 0, "rank": 0}, [np.zeros(64, np.float32)]))
        replies = [store.handle(f"w{r}".encode(), _push(1, r, terms[r], 1)) for r in order]
        assert [len(r) for r in replies] == [0, 0, 0, 4]
        np.testing.assert_array_equal(store.values[Slot(1)], want)
    store = KeyValueStore(0, 4, groups=groups)
    store.handle(b"w0", Message(Op.INIT, {"key": 1, "seq": 0, "rank": 0}, [np.zeros(64, np.float32)]))
    assert store.handle(b"w3", _push(1, 3, terms[3], 1)) == []
    assert store.handle(b"w1", _push(1, 1, terms[1], 1)) == []
    done = store.handle(b"w0", _push(1, 0, terms[0] + terms[2], 2, ranks=[0, 2]))
    assert len(done) == 3
    np.testing.assert_array_equal(store.values[Slot(1)], want)
    assert store.pushes == {0: 1, 1: 1, 3: 1}


def test_a_group_push_must_come_from_the_leader_and_name_its_group() -> None:
    store = KeyValueStore(0, 4, groups=((0, 2), (1, 3)))
    store.handle(b"w0", Message(Op.INIT, {"key": 1, "seq": 0, "rank": 0}, [np.zeros(2, np.float32)]))
    for rank, ranks in [(2, [0, 2]), (0, [0, 1]), (0, [0]), (0, "0,2"), (1, [1, 3, 3])]:
        ((_, reply),) = store.handle(b"w", _push(1, rank, np.ones(2, np.float32), 1, ranks=ranks))
        assert reply.op == Op.ERROR and f"stands for ranks {shown(ranks)}" in reply["reason"], reply["reason"]
    assert store.handle(b"w0", _push(1, 0, np.ones(2, np.float32), 2, ranks=[0, 2])) == []
    ((_, twice),) = store.handle(b"w2", _push(1, 2, np.ones(2, np.float32), 3))
    assert "worker 2 pushed key 1 twice in one round" in twice["reason"]


@pytest.mark.parametrize("groups", [[0, 2, 1, 1], [1, 0, 0, 1], [0, 0, 1], [0, -1, 0, 0], [0, True, 1, 1], "0011"])
def test_a_welcome_with_bad_groups_is_refused(groups: object) -> None:
    fields = {"rank": 0, "num_server": 1, "num_worker": 4, "servers": [], "groups": groups}
    with pytest.raises(WireError, match="groups must give each of the 4 worker ranks a group number"):
        Welcome.from_message(Message(Op.WELCOME, fields))


def test_group_numbers_follow_host_and_machine() -> None:
    places = [("10.0.0.1", "m1"), ("10.0.0.2", "m2"), ("10.0.0.1", "m1"), ("10.0.0.1", "m3"), ("10.0.0.2", "")]
    assert group_numbers(places) == (0, 1, 0, 2, 3)  # no machine id: alone
