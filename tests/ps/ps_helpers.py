"""Worker programs for tests/ps/test_ps.py, run as ``python tests/ps/ps_helpers.py SCENARIO``.

Each reads the DMLC_* environment like a real trainer, checks its own results
(exiting 1 with a message on a mismatch) and prints one JSON line of facts for
the test to assert on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from clipflow.errors import FAILURES
from clipflow.ps import KVStore
from clipflow.ps.customer import Request
from clipflow.ps.wire import Op

MODE = os.environ.get("PYTEST_CLIPFLOW_MODE", "dist_sync")


def expect(ok: bool, what: str) -> None:
    if not ok:
        print(f"check failed: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def value(key: int, shape: tuple[int, ...], rank: int, round_: int) -> torch.Tensor:
    """Integer-valued floats, so sums are exact whatever the order."""
    numel = torch.Size(shape).numel()
    return (torch.arange(numel, dtype=torch.float32).reshape(shape) + key) * (rank + 1) + round_


def scenario_sum(kv: KVStore) -> dict:
    shapes = {0: (3, 4), 1: (50,), 2: (7,)}
    keys = list(shapes)
    kv.init(keys, [value(k, s, kv.rank, -1) for k, s in shapes.items()])
    for k, s in shapes.items():
        out = torch.zeros(s)
        kv.pull(k, out)
        expect(torch.equal(out, value(k, s, 0, -1)), f"pull after init of key {k} gives rank 0's value")
    for round_ in range(3):
        values = [value(k, s, kv.rank, round_) for k, s in shapes.items()]
        outs = [torch.zeros(s) for s in shapes.values()]
        outs[1] = values[1]  # in place, like pushpull(grad, out=grad)
        kv.pushpull(keys, values, outs)
        for k, s, out in zip(keys, shapes.values(), outs, strict=True):
            want = sum(value(k, s, r, round_) for r in range(kv.num_workers))
            expect(torch.equal(out, want), f"round {round_} key {k}: {out} != {want}")
    # several local devices: summed before the push; a float64 value is converted
    devices = [value(2, (7,), kv.rank, 10), value(2, (7,), kv.rank, 20).double()]
    kv.push(2, devices)
    out = torch.zeros(7, dtype=torch.float64)
    kv.pull(2, out)
    want = sum(value(2, (7,), r, 10) + value(2, (7,), r, 20) for r in range(kv.num_workers))
    expect(torch.equal(out, want.double()), f"push of a device list: {out} != {want}")
    stats = kv.server_stats()
    kv.barrier()
    return {"rank": kv.rank, "stats": [{str(k): n for k, n in s.items()} for s in stats]}


def scenario_bcast(kv: KVStore) -> dict:
    requested = os.environ.get("DMLC_RANK")
    out = torch.zeros(4)
    kv.broadcast(5, torch.full((4,), 10.0 + kv.rank), out)
    expect(torch.equal(out, torch.full((4,), 10.0)), f"broadcast gives rank 0's value, got {out}")
    kv.broadcast(5, torch.full((4,), 20.0 + kv.rank), out)
    expect(torch.equal(out, torch.full((4,), 20.0)), f"second broadcast gives rank 0's value, got {out}")
    marker = Path(os.environ["PYTEST_CLIPFLOW_DIR"]) / "before-barrier"
    if kv.rank == 0:
        time.sleep(0.5)
        marker.write_text("rank 0 was here")
    kv.barrier()
    expect(marker.exists(), "rank 0 wrote its marker before anyone left the barrier")
    kv.init(6, torch.zeros(3))
    kv.push(6, torch.full((3,), float(kv.rank + 1)))
    kv.barrier()
    out = torch.zeros(3)
    kv.pull(6, out)
    pushed = [torch.full((3,), float(r + 1)) for r in range(kv.num_workers)]
    if kv.type == "dist_async_device":  # both workers on one host: their sum is pushed once, as one update
        expect(torch.equal(out, sum(pushed)), f"async pull after one host's aggregated push gives the sum, got {out}")
    elif "async" in kv.type:
        expect(any(torch.equal(out, p) for p in pushed), f"async pull gives one worker's push, got {out}")
    else:
        expect(torch.equal(out, sum(pushed)), f"sync pull gives the sum, got {out}")
    return {"rank": kv.rank, "requested": requested, "type": kv.type, "num_workers": kv.num_workers}


def scenario_hang(kv: KVStore) -> dict:
    kv.init(0, torch.zeros(8))
    grad = torch.ones(8)
    kv.pushpull([0], [grad], [grad])
    print(json.dumps({"round0": kv.rank}), flush=True)
    if kv.rank == 1:
        time.sleep(120)  # "computing" until the test kills this process
    kv.pushpull([0], [grad], [grad])  # waits for worker 1, which never comes
    return {"rank": kv.rank, "unexpected": "second round completed"}


def scenario_raise(kv: KVStore) -> dict:
    kv.init(0, torch.zeros(8))
    if kv.rank == 1:
        raise RuntimeError("boom on purpose")
    grad = torch.ones(8)
    kv.pushpull([0], [grad], [grad])
    return {"rank": kv.rank, "unexpected": "pushpull completed"}


def scenario_refused(kv: KVStore) -> dict:
    """Worker 1 sends a request out of protocol (a pull from element -1), which the server refuses."""
    kv.init(0, torch.zeros(4))
    if kv.rank == 1:
        seq = kv._customer.request(Request(0, Op.PULL, 0, fields={"start": -1}))
        kv._customer.wait([seq])
    kv.barrier()  # worker 0 waits here until the job is aborted
    return {"rank": kv.rank, "unexpected": "the barrier completed"}


SCENARIOS = {"sum": scenario_sum, "bcast": scenario_bcast, "hang": scenario_hang, "raise": scenario_raise}
CLI_SCENARIOS = {"refused": scenario_refused}  # run as `clipflow train` runs its worker


def main() -> None:
    if sys.argv[1] in CLI_SCENARIOS:
        run_like_the_cli(CLI_SCENARIOS[sys.argv[1]])
        return
    kv = KVStore.create(MODE)
    facts = SCENARIOS[sys.argv[1]](kv)
    kv.close()
    print(json.dumps(facts), flush=True)


def run_like_the_cli(scenario: Callable[[KVStore], dict]) -> None:
    """An exception leaving the ``with`` tells the scheduler; a ClipflowError or CommError then ends the
    process with one line and its kind's exit status, as ``clipflow.cli.main`` does."""
    try:
        with KVStore.create(MODE) as kv:
            facts = scenario(kv)
    except FAILURES as exc:
        print(f"clipflow: {exc.label}: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_status)
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
