"""Per-host aggregation (dist_sync_device) and the servers' fixed sum order, on real processes and sockets.

Two "hosts" on one machine: workers 0 and 1 advertise 127.0.0.1, workers 2 and 3 127.0.0.2 (both loopback), with
one server on each; see tests/ps_hostgroup_helpers.py.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch
from ps_cluster_helpers import HB_TIMEOUT, Cluster
from ps_hostgroup_helpers import BOUND, start_two_hosts

from clipflow.ps.exitcodes import ABORTED


def _run_exact(
    make_cluster: Callable[..., Cluster], tmp: Path, mode: str, delayed: int | None = None
) -> tuple[dict, list[dict]]:
    tmp.mkdir()
    cluster = make_cluster(2, 4, CLIPFLOW_TEST_DIR=str(tmp), MXNET_KVSTORE_BIGARRAY_BOUND=BOUND)
    workers = start_two_hosts(cluster, "exact", mode, delayed)
    cluster.wait_ok()
    results = [torch.load(tmp / f"results-{r}.pt") for r in range(4)]
    return results[0], [w.facts() for w in workers] + [{"results": results}]


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
