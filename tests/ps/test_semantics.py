"""MXNet kvstore semantics on the parameter server: optimizer on the servers, 2-bit compression, PSSync.

Unit tests first, then real scheduler/server/worker processes on loopback sockets
(the Cluster of tests/ps/ps_cluster_helpers.py; worker programs in tests/ps/ps_semantics_helpers.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ps_cluster_helpers import Cluster, _msg

from clipflow.ps.compression import TwoBitCompression, dequantize_2bit, pack_2bit, quantize_2bit
from clipflow.ps.optimizer import SGD, KeySet
from clipflow.ps.store import KeyValueStore
from clipflow.ps.wire import Message, Op

HERE = Path(__file__).resolve().parent
HELPERS = HERE / "ps_semantics_helpers.py"
TOL = 1e-5
PROC_TIMEOUT = 120.0

# -- 2-bit compression against a plain reference -------------------------------------------------


def reference_2bit(grad: np.ndarray, residual: np.ndarray, threshold: float) -> tuple[list[float], list[int]]:
    """MXNet's rule element by element (residual updated in place); returns (values sent, packed words).

    Codes: 0b11 = +t, 0b10 = -t, 0b00 = 0. Element i goes to word i // 16, byte (i % 16) // 4 of the
    word's little-endian bytes, bits 7-6 / 5-4 / 3-2 / 1-0 for i % 4 = 0 / 1 / 2 / 3.
    """
    t = np.float32(threshold)
    values: list[float] = []
    codes: list[int] = []
    for i in range(grad.size):
        residual[i] = np.float32(residual[i] + grad[i])
        if residual[i] >= t:
            residual[i] = np.float32(residual[i] - t)
            values.append(float(t))
            codes.append(0b11)
        elif residual[i] <= -t:
            residual[i] = np.float32(residual[i] + t)
            values.append(float(-t))
            codes.append(0b10)
        else:
            values.append(0.0)
            codes.append(0b00)
    words = []
    for w in range((grad.size + 15) // 16):
        word = 0
        for j in range(16):
            i = w * 16 + j
            if i < grad.size:
                word |= codes[i] << (8 * (j // 4) + 6 - 2 * (j % 4))
        words.append(word)
    return values, words


@pytest.mark.parametrize("threshold", [0.5, 0.25])
def test_two_bit_compression_matches_plain_reference_bit_for_bit(threshold: float) -> None:
    rng = np.random.default_rng(5)
    sizes = [1, 16, 37, 100, 333]
    lib = TwoBitCompression(threshold)
    ref_residuals = {n: np.zeros(n, dtype=np.float32) for n in sizes}
    for _ in range(6):
        for n in sizes:
            grad = rng.normal(0.0, 0.7, n).astype(np.float32)
            grad[: n // 5] = np.float32(threshold)  # exactly at the threshold: >= sends +t
            grad[n // 5 : n // 4] = -np.float32(threshold)
            # the library compresses per part, as for a key split over servers (two parts here)
            cut = n // 2
            parts = [lib.compress(n, n, 0, grad[:cut]), lib.compress(n, n, cut, grad[cut:])]
            for (words, fields), (lo, hi) in zip(parts, [(0, cut), (cut, n)], strict=True):
                values, ref_words = reference_2bit(grad[lo:hi], ref_residuals[n][lo:hi], threshold)
                assert words.dtype == np.uint32 and words.tolist() == ref_words
                assert fields == {"compression": "2bit", "threshold": threshold, "size": hi - lo}
                deq = dequantize_2bit(words, hi - lo, np.float32(threshold))
                assert deq.dtype == np.float32 and deq.tolist() == values
            assert lib.residuals[n].tobytes() == ref_residuals[n].tobytes()  # bit for bit
    # the functions one by one, and the byte layout spelled out
    residual = np.zeros(4, dtype=np.float32)
    signs = quantize_2bit(np.array([0.6, -0.6, 0.1, 0.5], dtype=np.float32), residual, np.float32(0.5))
    assert signs.tolist() == [1, -1, 0, 1]
    f = np.float32
    assert residual.tolist() == [f(0.6) - f(0.5), f(-0.6) + f(0.5), f(0.1), f(0.0)]
    assert pack_2bit(signs).tolist() == [0b11_10_00_11]  # first element in the high bits of byte 0
    assert pack_2bit(np.zeros(0, dtype=np.int8)).size == 0


# -- the optimizer -------------------------------------------------------------------------------


@pytest.mark.parametrize("nesterov", [False, True])
def test_optimizer_matches_torch_sgd_with_changing_learning_rate(nesterov: bool) -> None:
    torch.manual_seed(0)
    start = torch.randn(2, 40)
    ref = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    opt = torch.optim.SGD(
        [{"params": [ref[0]], "weight_decay": 1e-3}, {"params": [ref[1]], "weight_decay": 0.0}],
        lr=0.1,
        momentum=0.9,
        nesterov=nesterov,
    )
    mine = SGD(learning_rate=0.1, momentum=0.9, wd=1e-3, nesterov=nesterov, rescale_grad=0.25)
    mine.set_wd_mult({1: 0.0})
    weights = [start[0].numpy().copy(), start[1].numpy().copy()]
    for step in range(8):
        lr = 0.1 / (1 + step)
        for group in opt.param_groups:
            group["lr"] = lr
        grads = torch.randn(2, 40) * 4  # a sum over 4 workers: rescale_grad 1/4 makes it a mean
        for i in range(2):
            ref[i].grad = grads[i] / 4
            mine.update(i, weights[i], grads[i].numpy(), lr=lr)
        opt.step()
    for i in range(2):
        np.testing.assert_allclose(weights[i], ref[i].detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(mine.states[i], opt.state[ref[i]]["momentum_buffer"].numpy(), rtol=0, atol=1e-6)
    assert SGD.from_config(mine.config()).config() == mine.config()
    with pytest.raises(ValueError, match="unknown optimizer"):
        SGD.from_config({"name": "rmsprop"})
    assert 5 in KeySet.of(range(3, 9)) and 9 not in KeySet.of(range(3, 9)) and 1 in KeySet.of(None)
    assert KeySet.of([4, 1, 2, 3, 9]).to_wire() == [[1, 5], [9, 10]]


def test_store_optimizes_merged_rounds_and_dequantizes_pushes() -> None:
    store = KeyValueStore(server_rank=0, num_worker=2)
    w0 = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
    for key in (1, 2):
        assert store.handle(b"w0", _msg(Op.INIT, key, 0, [w0], 1))[0][1].op == Op.OK
    config = SGD(learning_rate=0.5, momentum=0.9, wd=0.01, rescale_grad=0.5).config()
    set_opt = Message(Op.SET_OPTIMIZER, {"seq": 2, "optimizer": config, "keys": [[1, 2]]})
    assert store.handle(b"w0", set_opt)[0][1].op == Op.OK
    assert store.handle(b"w0", Message(Op.SET_MULT, {"seq": 3, "wd_mult": {"1": 0.5}}))[0][1].op == Op.OK
    # a compressed push from worker 0, a plain one from worker 1; worker 0's learning rate counts
    comp = TwoBitCompression(0.5)
    words, fields = comp.compress(1, 4, 0, np.array([0.7, -0.9, 0.2, 0.0], dtype=np.float32))
    assert store.handle(b"w1", _msg(Op.PUSH, 1, 1, [np.ones(4, dtype=np.float32)], 4, sync=True, lr=9.0)) == []
    replies = store.handle(b"w0", _msg(Op.PUSHPULL, 1, 0, [words], 5, sync=True, lr=0.25, **fields))
    expected = SGD(learning_rate=0.5, momentum=0.9, wd=0.01, rescale_grad=0.5)
    expected.set_wd_mult({1: 0.5})
    weight = w0.copy()
    expected.update(1, weight, np.array([0.5, -0.5, 0.0, 0.0], dtype=np.float32) + 1, lr=0.25)
    assert [m.op for _, m in replies] == [Op.OK, Op.VALUE]
    np.testing.assert_array_equal(replies[1][1].arrays[0], weight)
    # key 2 is outside the optimizer's keys: it still sums
    store.handle(b"w0", _msg(Op.PUSH, 2, 0, [w0], 6, sync=True, lr=0.25))
    store.handle(b"w1", _msg(Op.PUSH, 2, 1, [w0], 7, sync=True, lr=0.25))
    np.testing.assert_array_equal(store.values[(2, 0)], 2 * w0)
    states = store.handle(b"w0", Message(Op.GET_STATES, {"seq": 8}))[0][1]
    assert states["keys"] == [[1, 0]]  # [key, start]: a split key has one buffer per piece
    np.testing.assert_array_equal(states.arrays[0], expected.states[1])
    bad = store.handle(b"w0", _msg(Op.PUSH, 1, 0, [words[:0]], 9, sync=True, **fields))[0][1]
    assert bad.op == Op.ERROR and "words" in bad["reason"]


# -- real processes -----------------------------------------------------------------------------


def run_job(tmp: Path, mode: str, scenario: str, num_server: int = 2, **env: str) -> list[dict]:
    """Scheduler, servers and two workers running ``scenario``; the workers' facts by rank."""
    cluster = Cluster(tmp, num_server, 2, PYTEST_CLIPFLOW_MODE=mode, MXNET_KVSTORE_BIGARRAY_BOUND="50", **env)
    try:
        cluster.scheduler()
        for i in range(num_server):
            cluster.server(f"server{i}")
        workers = [cluster.start(f"worker{i}", "worker", [sys.executable, str(HELPERS), scenario]) for i in range(2)]
        cluster.wait_ok(PROC_TIMEOUT)
        return sorted((w.facts() for w in workers), key=lambda f: f["rank"])
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def sync_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[dict]]]:
    """One dist_sync job per flavour (2 servers, keys over 50 elements split): every sync check's facts.

    The Nesterov job also cuts each server's half of a split key into pieces of at most 16 elements
    (CLIPFLOW_PS_PIECE), each a round and a momentum buffer of its own on its server.
    """
    runs = {}
    for name, nesterov, piece in (("momentum", "0", "0"), ("nesterov", "1", "16")):
        tmp = tmp_path_factory.mktemp(f"sync-{name}")
        runs[name] = (
            tmp,
            run_job(tmp, "dist_sync", "sync", PYTEST_CLIPFLOW_NESTEROV=nesterov, CLIPFLOW_PS_PIECE=piece),
        )
    return runs


FLAVOURS = ["momentum", "nesterov"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_two_workers_at_batch_b_equal_one_process_at_batch_2b(sync_runs: dict, flavour: str) -> None:
    for facts in sync_runs[flavour][1]:
        assert facts["local_vs_ref"] <= TOL, facts  # update_on_kvstore=False, PSSync, vs plain torch
        # every bucket went out from a backward hook (overlapped), none waited for synchronize()
        assert facts["buckets"] == 3, facts  # biases (no weight decay), then weights in 2 buckets
        assert facts["pushed_in_backward"] == 2 * 5 * facts["buckets"] and facts["pushed_in_sync"] == 0, facts


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_update_on_kvstore_true_and_false_agree(sync_runs: dict, flavour: str) -> None:
    for facts in sync_runs[flavour][1]:
        assert facts["remote_vs_ref"] <= TOL, facts
        assert facts["remote_vs_local"] <= TOL, facts
        # the servers' momentum buffers (split keys reassembled) equal the local optimizer's
        local_keys, remote_keys = facts["state_keys"]
        assert len(local_keys) == facts["buckets"] and remote_keys == [k + 1_000_000 for k in local_keys]
        assert facts["states_diff"] <= TOL, facts


def test_gradient_clipping_scales_each_workers_gradients_before_the_push(sync_runs: dict) -> None:
    for facts in sync_runs["momentum"][1]:
        assert facts["clipped_vs_ref"] <= TOL, facts  # each half-batch clipped on its own, then averaged
        assert facts["clipped_vs_unclipped_ref"] > 100 * TOL, facts  # and the clipping did change the weights
        assert facts["clipped_pushed_in_backward"] == 0, facts  # the norm needs every gradient first


def test_optimizer_states_round_trip_through_servers(sync_runs: dict) -> None:
    for flavour in FLAVOURS:
        for facts in sync_runs[flavour][1]:
            keys, back = facts["roundtrip_keys"]
            assert keys == back and len(keys) == facts["buckets"], facts
            assert facts["roundtrip_equal"] and facts["restored_equal"], facts
            assert any(shape[0] > 50 for shape in facts["state_shapes"].values())  # a split key among them


def test_two_bit_pushpull_end_to_end(sync_runs: dict) -> None:
    from ps_semantics_helpers import GC_KEYS, GC_ROUNDS, GC_SIZES

    tmp = sync_runs["momentum"][0]
    files = [np.load(tmp / f"gc_rank{r}.npz") for r in range(2)]
    residuals = [{k: np.zeros(n, dtype=np.float32) for k, n in zip(GC_KEYS, GC_SIZES, strict=True)} for _ in files]
    for round_ in range(GC_ROUNDS):
        for k in GC_KEYS:
            sent = [
                np.array(reference_2bit(f[f"grad_{k}_{round_}"], res[k], 0.5)[0], dtype=np.float32)
                for f, res in zip(files, residuals, strict=True)
            ]
            want = sent[0] + sent[1]
            assert np.count_nonzero(want) > 0
            for f in files:
                np.testing.assert_array_equal(f[f"sum_{k}_{round_}"], want)


def test_dist_async_reaches_the_dist_sync_loss(sync_runs: dict, tmp_path: Path) -> None:
    sync = sync_runs["momentum"][1][0]["fit"]
    facts = run_job(tmp_path, "dist_async", "async", num_server=1)
    finals = [f["fit"]["final"] for f in facts]
    assert finals[0] == finals[1]  # both pulled the same final weights after the barrier
    floor, final = sync["floor"], finals[0]
    assert sync["first"] > 500 * floor  # far from solved at the start (about 1270x the floor)
    # Least squares (8 inputs + bias, noise 0.1): the best possible loss, floor, is ~0.0089. After 40
    # steps (2.5 passes, lr 0.1, momentum 0.5) dist_sync ends ~5% above it: what is left is SGD's
    # minibatch jitter. dist_async applies each worker's half-gradient alone, computed on weights at most
    # one update stale, so it ends at the floor plus a jitter of the same order (measured: 3-8% above,
    # |async - sync| <= 3.5% of the floor over 6 runs). Allowed: both within 25% of the floor and
    # |async - sync| <= 20% of it, 6x the spread seen yet 1/2500 of the starting loss: an async run
    # that loses, repeats or mis-scales updates does not land there.
    assert sync["final"] <= 1.25 * floor, sync
    assert final <= 1.25 * floor, (final, sync)
    assert abs(final - sync["final"]) <= 0.2 * floor, (final, sync)
