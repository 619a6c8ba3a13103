"""Parameter server: unit tests, then real scheduler/server/worker processes on loopback sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest
from ps_cluster_helpers import HB_TIMEOUT, SRC, Cluster, base_env

from clipflow.errors import ABORTED, ClipflowError, CommError, JobAborted
from clipflow.ps import KVStore, PSConfig, run_role
from clipflow.ps.log import Log
from clipflow.ps.placement import Placement, split_sizes
from clipflow.ps.scheduler import Scheduler, _Abort
from clipflow.ps.store import KeyValueStore
from clipflow.ps.transport import INVALID_OP
from clipflow.ps.wire import Message, Op, WireError, decode, encode

# -- env ----------------------------------------------------------------------------------------


def test_env_defaults_and_overrides() -> None:
    cfg = PSConfig.from_env(base_env())
    assert (cfg.role, cfg.root_uri, cfg.root_port, cfg.num_server, cfg.num_worker) == (
        "worker",
        "127.0.0.1",
        9091,
        1,
        2,
    )
    assert cfg.node_host == "127.0.0.1"  # loopback root: advertise the root URI
    assert (cfg.verbose, cfg.bigarray_bound, cfg.rank) == (0, 1_000_000, None)
    assert (cfg.heartbeat_interval, cfg.heartbeat_timeout, cfg.startup_timeout) == (1.0, 30.0, 120.0)
    cfg = PSConfig.from_env(
        base_env(
            DMLC_NODE_HOST="10.0.0.7",
            DMLC_INTERFACE="eth0",
            PS_VERBOSE="2",
            MXNET_KVSTORE_BIGARRAY_BOUND="64",
            DMLC_RANK="1",
            CLIPFLOW_HEARTBEAT_INTERVAL="0.5",
            CLIPFLOW_HEARTBEAT_TIMEOUT="5",
            CLIPFLOW_STARTUP_TIMEOUT="9",
        )
    )
    assert (cfg.node_host, cfg.interface, cfg.verbose, cfg.bigarray_bound, cfg.rank) == ("10.0.0.7", "eth0", 2, 64, 1)
    assert (cfg.heartbeat_interval, cfg.heartbeat_timeout, cfg.startup_timeout) == (0.5, 5.0, 9.0)


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"DMLC_NUM_WORKER": "two"}, ["DMLC_NUM_WORKER", "'two'"]),
        ({"DMLC_PS_ROOT_PORT": None}, ["DMLC_PS_ROOT_PORT", "not set"]),
        ({"DMLC_PS_ROOT_PORT": "70000"}, ["DMLC_PS_ROOT_PORT", "1-65535"]),
        ({"DMLC_ROLE": "boss"}, ["DMLC_ROLE", "scheduler, server, worker"]),
        ({"DMLC_ROLE": None}, ["DMLC_ROLE", "not set"]),
        ({"DMLC_NUM_SERVER": "0"}, ["DMLC_NUM_SERVER", ">= 1"]),
        ({"DMLC_RANK": "2"}, ["DMLC_RANK", "0..1", "DMLC_NUM_WORKER=2"]),
        ({"PS_VERBOSE": "3"}, ["PS_VERBOSE"]),
        ({"CLIPFLOW_HEARTBEAT_TIMEOUT": "0.5"}, ["CLIPFLOW_HEARTBEAT_TIMEOUT", "CLIPFLOW_HEARTBEAT_INTERVAL"]),
        ({"CLIPFLOW_STARTUP_TIMEOUT": "-1"}, ["CLIPFLOW_STARTUP_TIMEOUT", "> 0"]),
        ({"CLIPFLOW_PS_PIECE": "-5"}, ["CLIPFLOW_PS_PIECE", "elements per piece", "'-5'"]),
        ({"CLIPFLOW_PS_PIECE": "big"}, ["CLIPFLOW_PS_PIECE", "(0: off)"]),
    ],
)
def test_env_errors_name_the_variable(change: dict[str, str | None], names: list[str]) -> None:
    env = base_env()
    for name, val in change.items():
        if val is None:
            env.pop(name)
        else:
            env[name] = val
    with pytest.raises(ClipflowError) as info:
        PSConfig.from_env(env)
    for name in names:
        assert name in str(info.value)


def test_unknown_mode_and_wrong_role_are_rejected_before_connecting() -> None:
    cfg = PSConfig.from_env(base_env())
    with pytest.raises(ClipflowError, match="dist_sync, dist_async, dist_sync_device, dist_async_device"):
        KVStore.create("local_allreduce", cfg)
    with pytest.raises(ClipflowError, match="DMLC_ROLE must be 'worker'"):
        KVStore.create("dist_sync", PSConfig.from_env(base_env(DMLC_ROLE="server")))
    with pytest.raises(ClipflowError, match="workers are the training processes"):
        run_role(base_env())


# -- placement ----------------------------------------------------------------------------------


def test_split_sizes_are_even_and_contiguous() -> None:
    assert split_sizes(10, 3) == [4, 3, 3]
    assert split_sizes(9, 3) == [3, 3, 3]
    assert split_sizes(2, 4) == [1, 1, 0, 0]
    placement = Placement(num_servers=3, bound=5)
    parts = placement.place(7, 11)
    assert [(p.server, p.start, p.stop) for p in parts] == [(0, 0, 4), (1, 4, 8), (2, 8, 11)]
    assert placement.place(7, 11) == parts  # same key, same answer
    with pytest.raises(ValueError, match="key 7"):
        placement.place(7, 12)
    assert len(Placement(num_servers=4, bound=1).place(0, 2)) == 2  # empty parts are dropped
    pieces = Placement(num_servers=2, bound=10, piece=6).place(1, 40)  # halves of 20, in pieces of at most 6
    assert [(p.server, p.start, p.stop) for p in pieces] == [
        (0, 0, 5), (0, 5, 10), (0, 10, 15), (0, 15, 20), (1, 20, 25), (1, 25, 30), (1, 30, 35), (1, 35, 40)
    ]  # fmt: skip
    assert len(Placement(num_servers=2, bound=10, piece=6).place(2, 10)) == 1  # not split: never cut
    assert len(Placement(num_servers=3, bound=5).place(8, 5)) == 1  # at the bound: whole


PLACEMENT_TABLE = """
import json
from clipflow.ps.placement import Placement
placement = Placement(4, 900)
sizes = [(k * 37) % 1000 + 1 for k in range(200)]
print(json.dumps([[p.server for p in placement.place(k, n)] for k, n in enumerate(sizes)]))
"""


def test_placement_is_deterministic_across_processes_and_balanced() -> None:
    tables = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", PLACEMENT_TABLE], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        tables.append(json.loads(out.stdout))
    assert tables[0] == tables[1]
    assert {len(row) for row in tables[0]} == {1, 4}  # small keys whole, big ones over all 4 servers
    placement = Placement(4, 10**9)
    for k in range(400):
        placement.place(k, 100)
    assert placement.loads == [10_000] * 4
    small = Placement(8, 10)
    assert len({small.place(k, 1)[0].server for k in range(8)}) == 8  # least-loaded first


# -- wire and the server's key-value logic ------------------------------------------------------


def test_wire_round_trip_without_copies_or_pickle() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    frames = encode(Message(Op.PUSH, {"key": 3, "seq": 9}, [arr]))
    assert json.loads(bytes(frames[0])) == {"op": "push", "key": 3, "seq": 9, "arrays": [["float32", [3, 4]]]}
    msg = decode([bytes(f) for f in frames])
    assert (msg.op, msg["key"], msg["seq"]) == ("push", 3, 9)
    np.testing.assert_array_equal(msg.arrays[0], arr)
    with pytest.raises(WireError, match="needs 48 bytes"):
        decode([frames[0], b"\0" * 8])
    with pytest.raises(WireError):
        decode([b"\x80\x04not json"])
    with pytest.raises(WireError, match="cannot be sent"):
        encode(Message(Op.PUSH, {}, [np.zeros(2, dtype=object)]))


def _push(op: str, key: int, rank: int, values: list[float], seq: int, sync: bool = True) -> Message:
    return Message(op, {"key": key, "seq": seq, "rank": rank, "sync": sync}, [np.array(values, dtype=np.float32)])


def test_store_sums_a_round_and_answers_only_when_complete() -> None:
    store = KeyValueStore(server_rank=0, num_worker=2)
    assert store.handle(b"w0", _push(Op.INIT, 1, 0, [1, 1], 1))[0][1].op == Op.OK
    assert store.handle(b"w1", _push(Op.INIT, 1, 1, [5, 5], 2))[0][1].op == Op.OK  # first init wins
    assert store.handle(b"w0", _push(Op.PUSHPULL, 1, 0, [1, 2], 3)) == []
    dup = store.handle(b"w0", _push(Op.PUSH, 1, 0, [1, 2], 4))
    assert "twice in one round" in dup[0][1]["reason"]
    replies = store.handle(b"w1", _push(Op.PUSH, 1, 1, [10, 20], 5))
    assert [(peer, m.op, m["seq"]) for peer, m in replies] == [(b"w0", Op.VALUE, 3), (b"w1", Op.OK, 5)]
    np.testing.assert_array_equal(replies[0][1].arrays[0], [11, 22])
    missing = store.handle(b"w0", Message(Op.PULL, {"key": 2, "seq": 6}))
    assert "key 2 is not initialised" in missing[0][1]["reason"]
    async_reply = store.handle(b"w0", _push(Op.PUSHPULL, 1, 0, [7, 7], 7, sync=False))
    np.testing.assert_array_equal(async_reply[0][1].arrays[0], [7, 7])


def test_store_refuses_unknown_and_malformed_requests_with_an_error_reply() -> None:
    store = KeyValueStore(server_rank=3, num_worker=1)
    ((peer, unknown),) = store.handle(b"w0", Message("bogus", {"key": 1, "seq": 4}))
    assert (peer, unknown.op, unknown["seq"]) == (b"w0", Op.ERROR, 4)
    assert unknown["reason"] == "server 3: unknown operation 'bogus'"
    ((_, broken),) = store.handle(b"w0", Message(INVALID_OP, {"reason": "malformed message: empty message"}))
    assert broken.op == Op.ERROR and broken["reason"] == "server 3: malformed message: empty message"
    ((_, early),) = store.handle(b"w0", Message(Op.GET_STATES, {"seq": 5}))
    assert early.op == Op.ERROR and early["reason"] == "server 3: get_states before set_optimizer"


def test_failures_by_kind() -> None:
    """Broken messages are communication failures (and stay ValueErrors); an abort echo exits like one."""
    with pytest.raises(CommError) as info:
        decode([b"not json"])
    assert isinstance(info.value, WireError) and isinstance(info.value, ValueError)
    assert not isinstance(info.value, ClipflowError) and info.value.exit_status == 76
    assert issubclass(JobAborted, CommError) and JobAborted.exit_status == ABORTED
    assert (ClipflowError.label, CommError.label, JobAborted.label) == ("error", "communication failure", "aborted")


def test_scheduler_ends_the_job_on_a_barrier_out_of_protocol() -> None:
    class Sent(list):
        def try_send(self, msg: Message, peer: bytes | None = None) -> bool:
            self.append((peer, msg))
            return True

    cfg = PSConfig.from_env(base_env(DMLC_ROLE="scheduler", DMLC_NUM_WORKER="1"))
    scheduler = Scheduler(cfg, Sent(), Log("scheduler"))  # type: ignore[arg-type]
    scheduler._handle(b"w/c", Message(Op.REGISTER, {"uid": "w", "role": "worker", "host": "h"}), 0.0)
    with pytest.raises(_Abort, match="worker \\(rank not yet assigned\\) on h sent a barrier with a bad seq 'x'"):
        scheduler._handle(b"w/c", Message(Op.BARRIER, {"uid": "w", "seq": "x"}), 0.0)


# -- real processes -----------------------------------------------------------------------------


@pytest.mark.parametrize("num_server", [1, 2])
def test_dist_sync_pushpull_sums_exactly_and_splits_big_keys(
    make_cluster: Callable[..., Cluster], num_server: int
) -> None:
    cluster = make_cluster(num_server, 2, MXNET_KVSTORE_BIGARRAY_BOUND="20")
    cluster.scheduler()
    for i in range(num_server):
        cluster.server(f"server{i}")
    workers = [cluster.worker(f"worker{i}", "sum") for i in range(2)]
    cluster.wait_ok()
    facts = [w.facts() for w in workers]
    assert sorted(f["rank"] for f in facts) == [0, 1]
    stats = facts[0]["stats"]
    assert len(stats) == num_server
    if num_server == 2:
        assert [s["1"] for s in stats] == [25, 25]  # key 1 (50 elements > bound 20) is split over both servers
        assert sorted(k for s in stats for k in s) == ["0", "1", "1", "2"]  # small keys whole, on one server each
    else:
        assert stats == [{"0": 12, "1": 50, "2": 7}]


def test_broadcast_barrier_and_requested_ranks(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2, PYTEST_CLIPFLOW_MODE="dist_async_device")
    cluster.scheduler()
    cluster.server()
    first = cluster.worker("asks-rank1", "bcast", DMLC_RANK="1")
    time.sleep(0.5)  # registers first, yet must get the rank it asked for
    second = cluster.worker("asks-rank0", "bcast", DMLC_RANK="0")
    cluster.wait_ok()
    assert first.facts() == {"rank": 1, "requested": "1", "type": "dist_async_device", "num_workers": 2}
    assert second.facts()["rank"] == 0


def test_duplicate_rank_request_aborts_naming_it(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(2, 1)
    scheduler = cluster.scheduler()
    servers = [cluster.server(f"server{i}", DMLC_RANK="0") for i in range(2)]
    exits = cluster.wait_exits(cluster.procs, 20)
    assert all(rc == ABORTED for rc, _ in exits.values()), exits
    for p in [scheduler, *servers]:
        assert "two servers requested DMLC_RANK=0" in p.stderr()


def test_terminated_scheduler_tells_the_others(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 1, PS_VERBOSE="1")
    scheduler = cluster.scheduler()
    server = cluster.server()
    deadline = time.monotonic() + 20
    while "registered server" not in scheduler.stderr():
        assert time.monotonic() < deadline, scheduler.stderr()
        time.sleep(0.05)
    scheduler.popen.send_signal(signal.SIGTERM)
    exits = cluster.wait_exits(cluster.procs, 10)
    assert exits["scheduler"][0] == ABORTED and exits["server"][0] == ABORTED, exits
    assert "was terminated (SIGTERM)" in server.stderr(), server.stderr()


def test_killed_worker_aborts_the_whole_job(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2)
    scheduler = cluster.scheduler()
    server = cluster.server()
    survivor = cluster.worker("worker0", "hang", DMLC_RANK="0")
    victim = cluster.worker("worker1", "hang", DMLC_RANK="1")
    deadline = time.monotonic() + 40
    while '"round0": 1' not in victim.stdout():
        assert time.monotonic() < deadline and victim.popen.poll() is None, victim.stderr()
        time.sleep(0.05)
    time.sleep(0.5)  # worker 0 is now waiting in its second pushpull
    victim.popen.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    others = [scheduler, server, survivor]
    exits = cluster.wait_exits(others, HB_TIMEOUT + 5)
    for p in others:
        rc, at = exits[p.name]
        assert rc is not None and rc != 0, f"{p.name} exited {rc}:\n{p.stderr()}"
        assert at - killed_at < HB_TIMEOUT + 4
        assert "worker 1 on 127.0.0.1 stopped answering" in p.stderr(), p.stderr()
    assert "unexpected" not in survivor.stdout()


def test_failing_worker_aborts_the_whole_job_with_its_error(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2)
    cluster.scheduler()
    cluster.server()
    cluster.worker("worker0", "raise", DMLC_RANK="0")
    failing = cluster.worker("worker1", "raise", DMLC_RANK="1")
    exits = cluster.wait_exits(cluster.procs, 40)
    assert exits.pop("worker1")[0] == 1, "the failing worker exits with its own error"
    assert all(rc == ABORTED for rc, _ in exits.values()), exits  # the others only echo it
    assert "RuntimeError: boom on purpose" in failing.stderr()  # its own traceback
    for p in cluster.procs:
        if p is not failing:
            assert "worker 1 on 127.0.0.1 failed: RuntimeError: boom on purpose" in p.stderr(), p.stderr()


def test_error_reply_is_a_communication_failure_that_ends_the_job(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2)
    cluster.scheduler()
    cluster.server()
    cluster.worker("worker0", "refused", DMLC_RANK="0")
    failing = cluster.worker("worker1", "refused", DMLC_RANK="1")
    exits = cluster.wait_exits(cluster.procs, 40)
    assert exits.pop("worker1")[0] == CommError.exit_status, failing.stderr()  # the cause: 76
    assert all(rc == ABORTED for rc, _ in exits.values()), exits  # the others only echo it
    reason = "server 0: pull of key 0 needs a start >= 0, got -1"
    assert f"clipflow: communication failure: {reason}" in failing.stderr(), failing.stderr()
    for p in cluster.procs:
        if p is not failing:
            assert f"worker 1 on 127.0.0.1 failed: CommError: {reason}" in p.stderr(), p.stderr()


def test_torch_import_is_not_needed_by_scheduler_and_servers() -> None:
    code = "import sys, clipflow.ps; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
