"""The link check's all-reduce, run as the workers of the plan's own roles (:mod:`clipflow.cluster.allreduce`):
``python -m clipflow.cluster.allreduce_probe BACKEND MODE BYTES ROUNDS``.

Every worker sums a float32 tensor of ``BYTES`` (ones) with the others, through the back end the run will use:

* ``ps``: ``KVStore.create(MODE)`` (the run's kvstore mode) with the plan's scheduler and servers, one key
  initialised, then ``pushpull`` of the key;
* ``ddp``: torch.distributed's gloo from the launcher's variables (:class:`clipflow.train.comm.DDPComm` on the
  CPU, as a CPU worker trains), then ``all_reduce``.

One untimed round first (connections, the servers' first allocation of the key), a barrier, then ``ROUNDS``
timed rounds; a round's seconds are worker 0's, from its call to its result. Each round's sum is checked (every
element must equal the number of workers). Worker 0 prints the figures as one :data:`REPLY` line (JSON): the
bytes each worker reduced, the mean seconds of a round, the workers, whether every sum was right.
"""

from __future__ import annotations

import json
import sys
import time

REPLY = "CLIPFLOW_ALLREDUCE "


def _rounds(reduce, tensor, workers: int, rounds: int, barrier) -> tuple[float, bool]:
    """Mean seconds of ``rounds`` timed calls of ``reduce(tensor)`` after an untimed one, and whether every sum
    was ``workers`` everywhere."""
    import torch

    def once() -> float:
        tensor.fill_(1.0)
        began = time.monotonic()
        reduce(tensor)
        took = time.monotonic() - began
        sums.append(bool(torch.all(tensor == float(workers))))
        return took

    sums: list[bool] = []
    once()
    barrier()  # the timed rounds start together
    total = sum(once() for _ in range(rounds))
    right = all(sums)
    return total / rounds, right


def run(backend: str, mode: str, nbytes: int, rounds: int) -> dict | None:
    """The all-reduce on this worker; worker 0's figures (None on the others)."""
    import torch  # here: the launching side reads REPLY without it

    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    if backend == "ps":
        from clipflow.ps import KVStore

        with KVStore.create(mode) as kv:
            kv.init(0, torch.zeros_like(tensor))
            seconds, right = _rounds(lambda t: kv.pushpull(0, t, t), tensor, kv.num_workers, rounds, kv.barrier)
            rank, workers = kv.rank, kv.num_workers
    else:
        from clipflow.train.comm import DDPComm, DDPConfig

        with DDPComm(DDPConfig.from_env(), torch.device("cpu")) as comm:
            seconds, right = _rounds(lambda t: comm.all_sum("meta", t), tensor, comm.num_workers, rounds,
                                     comm.barrier)  # fmt: skip
            rank, workers = comm.rank, comm.num_workers
    if rank != 0:
        return None
    return {"bytes": tensor.numel() * tensor.element_size(), "seconds": seconds, "workers": workers,
            "sum_right": right}  # fmt: skip


def main() -> None:
    backend, mode, nbytes, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    figures = run(backend, mode, nbytes, rounds)
    if figures is not None:
        print(REPLY + json.dumps(figures), flush=True)
    if figures is not None and not figures["sum_right"]:
        print(f"the all-reduce's sum is wrong: not {figures['workers']} everywhere", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
