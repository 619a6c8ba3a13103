"""Shared memory between a worker and a server on the same machine (clipflow.ps.shm).

Unit tests of the regions (real files in /dev/shm), then real jobs on 127.0.0.1 and
127.0.0.2: two "hosts" with a worker and a server each, where every worker must use
shared memory with the server beside it and TCP with the other, with exact sums,
dropped messages included; and a server in its own mount namespace (its own
/dev/shm, as in a container), which the workers must detect and reach over TCP.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable

import numpy as np
import pytest
from ps_cluster_helpers import TRANSPORT_HELPERS, Cluster, Proc, rounds
from ps_cluster_helpers import base_env as env
from ps_transport_helpers import ROUNDS

from clipflow.errors import ClipflowError
from clipflow.ps import PSConfig
from clipflow.ps.shm import SHM_DIR, Region, ServerRegions, available
from clipflow.ps.wire import Message, Op, WireError

pytestmark = pytest.mark.skipif(not available(), reason="needs a writable /dev/shm and a kernel boot id")


def test_settings() -> None:
    cfg = PSConfig.from_env(env())
    assert (cfg.shm, cfg.shm_min_bytes) == (True, 65536)
    cfg = PSConfig.from_env(env(CLIPFLOW_PS_SHM="0", CLIPFLOW_PS_SHM_MIN_BYTES="0"))
    assert (cfg.shm, cfg.shm_min_bytes) == (False, 0)
    with pytest.raises(ClipflowError, match=r"CLIPFLOW_PS_SHM must be 1 \(shared memory .*\) or 0; got 'yes'"):
        PSConfig.from_env(env(CLIPFLOW_PS_SHM="yes"))
    with pytest.raises(ClipflowError, match="CLIPFLOW_PS_SHM_MIN_BYTES must be a number of bytes.*got '-1'"):
        PSConfig.from_env(env(CLIPFLOW_PS_SHM_MIN_BYTES="-1"))


def _attach(regions: ServerRegions, peer: bytes, key: int, name: str, numel: int) -> Message:
    return regions.attach(peer, Message(Op.SHM_ATTACH, {"seq": 1, "key": key, "name": name, "numel": numel}))


def test_a_region_is_shared_and_its_file_can_go_at_once() -> None:
    worker_side = Region.create("test-worker", 10)
    try:
        regions = ServerRegions()
        assert _attach(regions, b"w0", 7, worker_side.name, 10).op == Op.OK
    finally:
        worker_side.unlink()
    assert not (SHM_DIR / worker_side.name).exists()
    worker_side.array[:] = np.arange(10, dtype=np.float32)  # the worker writes a push of the part at 4 ...
    push = regions.inbound(b"w0", Message(Op.PUSH, {"key": 7, "seq": 2, "shm": True, "start": 4, "size": 6}))
    assert push.arrays[0].tolist() == list(range(4, 10))  # ... the server reads that part
    value = Message(Op.VALUE, {"key": 7, "seq": 2, "start": 4}, [np.full(6, 3.0, np.float32)])
    reply = regions.outbound(b"w0", value)
    assert reply.arrays == [] and reply.get("shm") is True
    assert worker_side.array.tolist() == [0, 1, 2, 3] + [3.0] * 6  # the value went into the part's place
    other = regions.outbound(b"w1", Message(Op.VALUE, {"key": 7, "seq": 2}, [np.ones(10, np.float32)]))
    assert len(other.arrays) == 1 and not other.get("shm")  # a worker without a region gets the frame


def test_bad_attach_requests_are_refused_with_the_reason() -> None:
    regions = ServerRegions()
    with pytest.raises(WireError, match="bad shared-memory region name '../etc/passwd'"):
        _attach(regions, b"w0", 1, "../etc/passwd", 4)
    with pytest.raises(WireError, match="cannot open shared memory .*clipflow-ps-gone"):
        _attach(regions, b"w0", 1, "clipflow-ps-gone", 4)
    region = Region.create("test-size", 4)
    try:
        with pytest.raises(WireError, match="has 16 bytes, expected 20"):
            _attach(regions, b"w0", 1, region.name, 5)
    finally:
        region.unlink()
    with pytest.raises(WireError, match="integer key and numel"):
        _attach(regions, b"w0", 1, region.name, -1)
    with pytest.raises(WireError, match="push of key 3 names a shared-memory region that was never attached"):
        regions.inbound(b"w0", Message(Op.PUSH, {"key": 3, "seq": 1, "shm": True, "start": 0, "size": 1}))
    region = Region.create("test-bounds", 4)
    try:
        _attach(regions, b"w0", 3, region.name, 4)
    finally:
        region.unlink()
    with pytest.raises(WireError, match="push of key 3: elements 2 to 6 are outside its shared memory of 4"):
        regions.inbound(b"w0", Message(Op.PUSH, {"key": 3, "seq": 1, "shm": True, "start": 2, "size": 4}))
    with pytest.raises(WireError, match="push of key 3 through shared memory needs an integer start and size"):
        regions.inbound(b"w0", Message(Op.PUSH, {"key": 3, "seq": 1, "shm": True, "start": 0}))


def _two_hosts(cluster: Cluster, **server_env: str) -> list[Proc]:
    """Worker r and server r on 127.0.0.<r+1>: two machines' worth of roles on one loopback."""
    cluster.scheduler()
    for r in range(2):
        cluster.server(f"server{r}", DMLC_RANK=str(r), DMLC_NODE_HOST=f"127.0.0.{r + 1}", **server_env)
    return [rounds(cluster, f"worker{r}", DMLC_RANK=str(r), DMLC_NODE_HOST=f"127.0.0.{r + 1}") for r in range(2)]


# keys of 15 and 40 elements are split over both servers (8/7, 20/20); then the loads are 28 and 27 elements, so
# key 2 (7) goes whole to server 1. With pieces of at most 6 elements, the halves are cut into 2 and 4 pieces.
# Worker 0 shares keys 0 and 1 with server 0 (a region each), worker 1 all three keys with server 1.
@pytest.mark.parametrize(("drop", "piece", "parts"), [("0", "0", [2, 3]), ("10", "0", [2, 3]), ("10", "6", [6, 7])])
def test_each_worker_shares_memory_with_the_server_beside_it_only(
    make_cluster: Callable[..., Cluster], drop: str, piece: str, parts: list[int]
) -> None:
    cluster = _shm_cluster(make_cluster, drop, piece)
    workers = _two_hosts(cluster)
    cluster.wait_ok()  # every sum of ROUNDS rounds was exact (the helper checks with torch.equal)
    for r, worker in enumerate(workers):
        facts = worker.facts()
        assert facts["rounds"] == ROUNDS
        assert facts["shared_with"] == [r], facts
        assert facts["regions"] == [2, 3][r], facts  # one per key with parts on the server beside it
        assert facts["shm_parts"] == parts[r], facts  # the parts (pieces) held by that server
        assert facts["files_left"] == [], facts  # unlinked once the server mapped them
        if drop != "0":
            assert facts["dropped"] > 0 and facts["resent"] > 0, facts


def _shm_cluster(make_cluster: Callable[..., Cluster], drop: str, piece: str) -> Cluster:
    return make_cluster(
        2,
        2,
        CLIPFLOW_PS_SHM_MIN_BYTES="0",
        MXNET_KVSTORE_BIGARRAY_BOUND="10",  # keys of 15 and 40 elements are split over both servers
        PS_RESEND="1",
        PS_RESEND_TIMEOUT="100",
        CLIPFLOW_PS_DROP_PERCENT=drop,
        CLIPFLOW_PS_DROP_SEED="5",
        CLIPFLOW_PS_PIECE=piece,
    )


@pytest.mark.parametrize(("drop", "piece"), [("0", "0"), ("10", "6")])
def test_pushing_from_and_pulling_into_the_shared_buffer_gives_exact_sums(
    make_cluster: Callable[..., Cluster], drop: str, piece: str
) -> None:
    cluster = _shm_cluster(make_cluster, drop, piece)
    cluster.scheduler()
    for r in range(2):
        cluster.server(f"server{r}", DMLC_RANK=str(r), DMLC_NODE_HOST=f"127.0.0.{r + 1}")
    helper = [sys.executable, str(TRANSPORT_HELPERS), "buffers"]
    workers = [
        cluster.start(f"worker{r}", "worker", helper, DMLC_RANK=str(r), DMLC_NODE_HOST=f"127.0.0.{r + 1}")
        for r in range(2)
    ]
    cluster.wait_ok()  # every sum landed in the buffers exactly (checked by the helper)
    facts = [w.facts() for w in workers]
    assert [f["shared_buffers"] for f in facts] == [[0, 1], [0, 1, 2]], facts  # key 2 lives on server 1 only
    assert all(f["same_memory_each_call"] for f in facts), facts


def test_tcp_only_when_turned_off(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(2, 2, CLIPFLOW_PS_SHM="0", CLIPFLOW_PS_SHM_MIN_BYTES="0", MXNET_KVSTORE_BIGARRAY_BOUND="10")
    workers = _two_hosts(cluster)
    cluster.wait_ok()
    assert [w.facts()["shared_with"] for w in workers] == [[], []]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_a_server_with_its_own_dev_shm_is_reached_over_tcp(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2, CLIPFLOW_PS_SHM_MIN_BYTES="0")
    cluster.scheduler()
    python = "import sys; from clipflow.ps import run_role; sys.exit(run_role())"
    isolated = f"mount -t tmpfs tmpfs /dev/shm && exec {sys.executable} -c '{python}'"
    cluster.start("server", "server", ["unshare", "--mount", "--propagation", "private", "sh", "-c", isolated])
    workers = [rounds(cluster, f"worker{r}", DMLC_RANK=str(r)) for r in range(2)]
    cluster.wait_ok()
    for worker in workers:
        assert worker.facts()["shared_with"] == [], worker.facts()
        assert "shared memory with the servers on this machine failed" in worker.stderr(), worker.stderr()
        assert "cannot open shared memory" in worker.stderr()
