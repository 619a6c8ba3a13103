"""Worker programs and launch helpers for tests/ps/test_hostgroup.py (per-host aggregation and the fixed sum order).

Run as ``python tests/ps/ps_hostgroup_helpers.py SCENARIO``. The hosts are loopback addresses: ranks 0 and 1 advertise
127.0.0.1, ranks 2 and 3 127.0.0.2 (:func:`start_two_hosts`), so the canonical order of a round's sum is
``(w0 + w1) + (w2 + w3)``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

SHAPES = {0: (5, 7), 1: (3,), 2: (5000,)}  # key 2 is over the bound the tests set (1000): split over both servers
BOUND = "1000"
ROUNDS = 3
HOSTS = ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2")  # by requested rank
GROUPS = ((0, 1), (2, 3))


def gradient(key: int, rank: int, round_: int) -> torch.Tensor:
    """Random float32 of awkward magnitudes (1e-7 to 1e7, both signs): the order of a sum shows in its bits."""
    g = torch.Generator().manual_seed(1000 * round_ + 10 * key + rank)
    shape = SHAPES[key]
    mantissa = torch.randn(shape, generator=g)
    exponent = torch.randint(-7, 8, shape, generator=g).float()
    return (mantissa * 10.0**exponent).float()


def canonical_sum(key: int, round_: int) -> torch.Tensor:
    """The sum over the host groups in order of each group's sum in rank order, in float32."""
    total = None
    for group in GROUPS:
        part = gradient(key, group[0], round_).clone()
        for r in group[1:]:
            part += gradient(key, r, round_)
        total = part if total is None else total + part
    assert total is not None
    return total


def other_order_sum(key: int, round_: int) -> torch.Tensor:
    """The same terms added in arrival order 3, 1, 0, 2: differs in the last bits from the canonical sum."""
    total = gradient(key, 3, round_).clone()
    for r in (1, 0, 2):
        total += gradient(key, r, round_)
    return total


def scenario_exact() -> dict:
    """Rounds of pushpull, then of push + pull, of every key; each result must be exactly the canonical sum."""
    from clipflow.ps import KVStore

    kv = KVStore.create(os.environ["PYTEST_CLIPFLOW_MODE"])
    delay = float(os.environ.get("PYTEST_CLIPFLOW_DELAY_S", "0"))
    keys = list(SHAPES)
    kv.init(keys, [torch.zeros(s) for s in SHAPES.values()])
    results = {}
    order_matters = False
    for round_ in range(2 * ROUNDS):
        if delay:
            time.sleep(delay)  # this worker's pushes arrive last
        grads = [gradient(k, kv.rank, round_) for k in keys]
        outs = [torch.zeros(s) for s in SHAPES.values()]
        if round_ < ROUNDS:
            kv.pushpull(keys, grads, outs)
        else:
            for k, grad in zip(keys, grads, strict=True):
                kv.push(k, grad)
            kv.pull(keys, outs)
        for k, out in zip(keys, outs, strict=True):
            want = canonical_sum(k, round_)
            if not torch.equal(out, want):
                print(f"check failed: round {round_} key {k}: not the canonical sum", file=sys.stderr, flush=True)
                sys.exit(1)
            order_matters |= not torch.equal(want, other_order_sum(k, round_))
            results[f"{round_}/{k}"] = out
    pushes = kv.server_pushes()
    kv.barrier()
    torch.save(results, Path(os.environ["PYTEST_CLIPFLOW_DIR"]) / f"results-{kv.rank}.pt")
    kv.close()
    return {
        "rank": kv.rank,
        "order_matters": order_matters,
        "pushes": [{str(r): n for r, n in p.items()} for p in pushes],
    }


def scenario_stall() -> dict:
    """Rank 1 says it is in, then never pushes (the test kills it); the others wait for it in a pushpull."""
    from clipflow.ps import KVStore

    kv = KVStore.create(os.environ["PYTEST_CLIPFLOW_MODE"])
    kv.init(0, torch.zeros(4))
    if kv.rank == 1:
        (Path(os.environ["PYTEST_CLIPFLOW_DIR"]) / "stalled").write_text("in")
        time.sleep(600)
    grad = torch.ones(4)
    kv.pushpull(0, grad, grad)
    return {"rank": kv.rank}


def scenario_compression() -> dict:
    """2-bit compression with a _device mode: refused with a ClipflowError (its message in the facts)."""
    from clipflow.errors import ClipflowError
    from clipflow.ps import KVStore

    with KVStore.create(os.environ["PYTEST_CLIPFLOW_MODE"]) as kv:
        try:
            kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
        except ClipflowError as exc:
            return {"rank": kv.rank, "refused": str(exc)}
    return {"rank": kv.rank, "refused": None}


def start_two_hosts(cluster, scenario: str, mode: str, delayed: int | None = None, **env: str) -> list:
    """A scheduler, a server per host and 2 workers per host (ranks 0, 1 on 127.0.0.1; 2, 3 on 127.0.0.2); worker
    ``delayed`` sleeps 0.3 s before each round, so its pushes arrive last."""
    cluster.scheduler()
    for rank, host in enumerate(("127.0.0.1", "127.0.0.2")):
        cluster.server(f"server{rank}", DMLC_NODE_HOST=host, DMLC_RANK=str(rank))
    cmd = [sys.executable, __file__, scenario]
    return [
        cluster.start(
            f"worker{rank}",
            "worker",
            cmd,
            DMLC_NODE_HOST=host,
            DMLC_RANK=str(rank),
            PYTEST_CLIPFLOW_MODE=mode,
            PYTEST_CLIPFLOW_DELAY_S="0.3" if rank == delayed else "0",
            **env,
        )
        for rank, host in enumerate(HOSTS)
    ]


if __name__ == "__main__":
    facts = {"exact": scenario_exact, "stall": scenario_stall, "compression": scenario_compression}[sys.argv[1]]()
    print(json.dumps(facts), flush=True)
