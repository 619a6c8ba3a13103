"""An MXNet 1.9.1 dist_sync job as a user would write it: every worker pushes (rank + 1) times ones to one key
and pulls the sum, which it checks exactly and prints. ``--rounds N`` (default 1) repeats that, a fifth of a second
apart. Run by MXNet's launch.py, or `clipflow launch --mxnet`, which start its scheduler and servers with the same
command (importing mxnet with DMLC_ROLE=scheduler or server runs that role and exits)."""

import argparse
import sys
import time

import mxnet as mx

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=1)
args = parser.parse_args()

kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
shape = (2, 3)
kv.init(3, mx.nd.zeros(shape))
expected = workers * (workers + 1) // 2
for round_ in range(args.rounds):
    kv.push(3, mx.nd.ones(shape) * (rank + 1))
    out = mx.nd.zeros(shape)
    kv.pull(3, out=out)
    values = sorted(set(out.asnumpy().ravel().tolist()))
    print(f"mxnet worker {rank} of {workers} round {round_} pulled {values} expected {expected}", flush=True)
    if values != [float(expected)]:
        sys.exit(f"mxnet worker {rank}: pulled {values}, not {expected}")
    if round_ + 1 < args.rounds:
        time.sleep(0.2)
print(f"mxnet worker {rank} done", flush=True)
