"""Worker programs for tests/ps/test_transport.py, run as ``python tests/ps/ps_transport_helpers.py SCENARIO``.

Like tests/ps/ps_helpers.py: each reads the DMLC_* environment, checks its own results
(exiting 1 on a mismatch) and prints one JSON line of facts.
"""

from __future__ import annotations

import json
import sys

import torch

from clipflow.ps import KVStore
from clipflow.ps.shm import SHM_DIR

SHAPES = {0: (3, 5), 1: (40,), 2: (7,)}
ROUNDS = 20


def expect(ok: bool, what: str) -> None:
    if not ok:
        print(f"check failed: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def grad(key: int, rank: int, round_: int) -> torch.Tensor:
    """Random floats: their sums are still checked exactly, as the jobs have two workers and a + b == b + a
    in floating point whatever order the pushes reach the server in (with three the order would count)."""
    gen = torch.Generator().manual_seed(1_000_000 * round_ + 1000 * rank + key)
    return torch.randn(SHAPES[key], generator=gen)


def scenario_rounds(kv: KVStore) -> dict:
    """ROUNDS pushpulls of random tensors, a push+pull and barriers; every sum checked exactly."""
    keys = list(SHAPES)
    kv.init(keys, [torch.zeros(s) for s in SHAPES.values()])
    for round_ in range(ROUNDS):
        values = [grad(k, kv.rank, round_) for k in keys]
        outs = [torch.empty(s) for s in SHAPES.values()]
        kv.pushpull(keys, values, outs)
        for k, out in zip(keys, outs, strict=True):
            want = grad(k, 0, round_)
            for r in range(1, kv.num_workers):
                want = want + grad(k, r, round_)
            expect(torch.equal(out, want), f"round {round_} key {k}: the sum differs (a push lost or applied twice)")
        if round_ % 5 == 4:
            kv.barrier()
    kv.push(1, grad(1, kv.rank, 99))
    out = torch.empty(SHAPES[1])
    kv.pull(1, out)
    want = grad(1, 0, 99)
    for r in range(1, kv.num_workers):
        want = want + grad(1, r, 99)
    expect(torch.equal(out, want), "push then pull: the sum differs")
    return {
        "rank": kv.rank,
        "rounds": ROUNDS,
        "dropped": kv._customer.dropped,
        "resent": kv._customer.resent,
        "shared_with": sorted(kv._local),  # servers reached through shared memory (clipflow.ps.shm)
        "shm_parts": sum(len(shared.starts) for shared in kv._shared.values()),
        "regions": len(kv._shared),
        "files_left": sorted(f.name for f in SHM_DIR.glob(f"clipflow-ps-*{kv._link.uid}*")),
    }


def scenario_buffers(kv: KVStore) -> dict:
    """As ``rounds``, pushing from and pulling into each key's :meth:`KVStore.buffer`; sums checked exactly."""
    keys = list(SHAPES)
    kv.init(keys, [torch.zeros(s) for s in SHAPES.values()])
    buffers = [kv.buffer(k) for k in keys]
    for round_ in range(ROUNDS):
        for k, buf in zip(keys, buffers, strict=True):
            buf.copy_(grad(k, kv.rank, round_))
        kv.pushpull(keys, buffers, buffers)
        for k, buf in zip(keys, buffers, strict=True):
            want = sum(grad(k, r, round_) for r in range(kv.num_workers))
            expect(torch.equal(buf, want), f"round {round_} key {k}: the sum in the buffer differs")
    buf = buffers[1]
    buf.copy_(grad(1, kv.rank, 99))
    kv.push(1, buf)  # read in place by a server beside us
    kv.pull(1, buf)
    expect(torch.equal(buf, sum(grad(1, r, 99) for r in range(kv.num_workers))), "push then pull: the sum differs")
    again = kv.buffer(1)
    return {
        "rank": kv.rank,
        "shared_buffers": [k for k in keys if kv._is_buffer(k, kv.buffer(k))],
        "same_memory_each_call": again.data_ptr() == buf.data_ptr(),
    }


SCENARIOS = {"rounds": scenario_rounds, "buffers": scenario_buffers}


def main() -> None:
    kv = KVStore.create("dist_sync")
    facts = SCENARIOS[sys.argv[1]](kv)
    kv.close()
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
