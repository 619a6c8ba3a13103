"""Parameter-server throughput: 100 MB pushpull per iteration against gloo all_reduce and raw zmq.

One run, all on 127.0.0.1 (and 127.0.0.2), each figure in its own processes:

* clipflow dist_sync pushpull of one 25M-element float32 key (100 MB), 2 workers:
  ``tcp_1server`` and ``tcp_2servers`` with shared memory off (every byte through
  loopback TCP; with 2 servers the key is split over both, MXNET_KVSTORE_BIGARRAY_BOUND
  at its default); ``2hosts_1server`` and ``2hosts_2servers``: two hosts' worth of roles,
  worker r and server r advertising 127.0.0.<r+1>, so a worker reaches the server beside
  it through shared memory and the other one over TCP (with 2 servers, the launcher's
  default placement on 2 machines); ``2hosts_1server_buffer`` and ``2hosts_2servers_buffer``: the same, each
  worker pushing from and pulling into the key's :meth:`KVStore.buffer` (what the trainer's
  gradient buckets are), so the worker beside the server copies nothing;
  ``1host_shm``: everything on one host, shared memory on;
* torch.distributed gloo ``all_reduce`` of the same tensor, 2 processes;
* raw zmq: one process sends the 100 MB to another and gets it back (no PS logic),
  with the glibc malloc tuning the PS nodes use (:func:`clipflow.ps.transport.tune_malloc`)
  and without it. Both copy the answer into a result array, as a pull does.

Each job runs ``--repeat`` times, the jobs in turn (a slow spell of a shared machine then
hits every job alike); per job, warm-up iterations, then the median of all timed ones
(ms per iteration, as seen by worker / rank 0). Prints a table, then one JSON line.

Usage: ``.venv/bin/python bench/ps_throughput.py [--iters N] [--warmup N] [--repeat N] [--numel N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from clipflow.hosts.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
NUMEL = 25_000_000


def child_env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PS_", "MXNET_", "CLIPFLOW_"))}
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**clean, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def run_procs(cmds: list[tuple[list[str], dict[str, str]]], timeout: float = 300) -> list[str]:
    """Start every command, wait for all, return their stdouts (raise with stderr on a failure)."""
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd, env in cmds
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"{p.args} exited {p.returncode}:\n{err[-3000:]}")
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def self_cmd(args: argparse.Namespace) -> list[str]:
    """This script, run as a child with the same sizes."""
    sizes = ["--numel", str(args.numel), "--iters", str(args.iters), "--warmup", str(args.warmup)]
    return [sys.executable, __file__, *sizes]


def timings(out: str) -> list[float]:
    return json.loads(out.strip().splitlines()[-1])["ms"]


# -- clipflow -----------------------------------------------------------------------------------


def clipflow(num_server: int, args: argparse.Namespace, layout: str, buffer: bool = False) -> list[float]:
    """One clipflow job; ``layout``: ``tcp`` (one host, shared memory off), ``shm`` (one host, on) or
    ``2hosts`` (worker r and server r advertise 127.0.0.<r+1>: two machines' worth of roles, where a
    worker reaches a server beside it through shared memory and the others over TCP)."""
    base = child_env(
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT=str(free_port()),
        DMLC_NUM_SERVER=str(num_server),
        DMLC_NUM_WORKER="2",
        CLIPFLOW_STARTUP_TIMEOUT="60",
        CLIPFLOW_PS_SHM="0" if layout == "tcp" else "1",
    )

    def host(rank: int) -> dict[str, str]:
        return {"DMLC_NODE_HOST": f"127.0.0.{rank + 1}"} if layout == "2hosts" else {}

    role = [sys.executable, "-c", "import sys; from clipflow.ps import run_role; sys.exit(run_role())"]
    cmds = [(role, {**base, "DMLC_ROLE": "scheduler"})]
    cmds += [(role, {**base, **host(r), "DMLC_ROLE": "server", "DMLC_RANK": str(r)}) for r in range(num_server)]
    me = [*self_cmd(args), *(["--buffer"] if buffer else [])]
    cmds += [
        ([*me, "--role", "ps-worker"], {**base, **host(r), "DMLC_ROLE": "worker", "DMLC_RANK": str(r)})
        for r in range(2)
    ]
    outs = run_procs(cmds)
    return timings(outs[1 + num_server])


def ps_worker(args: argparse.Namespace) -> None:
    import torch

    from clipflow.ps import KVStore

    kv = KVStore.create("dist_sync")
    kv.init(0, torch.zeros(args.numel))
    grad = kv.buffer(0) if args.buffer else torch.empty(args.numel)
    ms = []
    for i in range(args.warmup + args.iters):
        grad.fill_(float(kv.rank + 1))
        start = time.perf_counter()
        kv.pushpull(0, grad, grad)
        if i >= args.warmup:
            ms.append((time.perf_counter() - start) * 1000)
    assert float(grad[0]) == 3.0 and float(grad[-1]) == 3.0, "wrong sum"
    kv.close()
    print(json.dumps({"ms": ms}), flush=True)


# -- gloo ---------------------------------------------------------------------------------------


def gloo(args: argparse.Namespace) -> list[float]:
    port = str(free_port())
    me = self_cmd(args)
    outs = run_procs([([*me, "--role", "gloo", "--rank", str(r), "--port", port], child_env()) for r in range(2)])
    return timings(outs[0])


def gloo_rank(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=2)
    grad = torch.full((args.numel,), float(args.rank + 1))
    ms = []
    for i in range(args.warmup + args.iters):
        grad.fill_(float(args.rank + 1))
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(grad)
        if i >= args.warmup:
            ms.append((time.perf_counter() - start) * 1000)
    assert float(grad[0]) == 3.0, "wrong sum"
    dist.destroy_process_group()
    print(json.dumps({"ms": ms}), flush=True)


# -- raw zmq ------------------------------------------------------------------------------------


def raw_zmq(args: argparse.Namespace, tune: bool) -> list[float]:
    port = str(free_port())
    me = [*self_cmd(args), "--port", port, *(["--malloc-tune"] if tune else [])]
    outs = run_procs([([*me, "--role", role], child_env()) for role in ("zmq-echo", "zmq-send")])
    return timings(outs[1])


def zmq_side(args: argparse.Namespace) -> None:
    import numpy as np
    import zmq

    from clipflow.ps.transport import make_context, make_socket

    ctx = make_context(malloc_tune=args.malloc_tune)  # as the PS nodes do (CLIPFLOW_PS_MALLOC_TUNE)
    if args.role == "zmq-echo":
        sock = make_socket(ctx, zmq.ROUTER)
        sock.bind(f"tcp://127.0.0.1:{args.port}")
        for _ in range(args.warmup + args.iters):
            frames = sock.recv_multipart(copy=False)
            sock.send_multipart(frames, copy=False)
        print(json.dumps({"ms": []}), flush=True)
    else:
        sock = make_socket(ctx, zmq.DEALER, b"sender")
        sock.connect(f"tcp://127.0.0.1:{args.port}")
        data = np.ones(args.numel, dtype=np.float32)
        out = np.empty_like(data)
        ms = []
        for i in range(args.warmup + args.iters):
            start = time.perf_counter()
            sock.send(memoryview(data).cast("B"), copy=False)
            frame = sock.recv(copy=False)
            np.copyto(out, np.frombuffer(frame.buffer, dtype=np.float32))  # like a pull into the caller's tensor
            if i >= args.warmup:
                ms.append((time.perf_counter() - start) * 1000)
        print(json.dumps({"ms": ms}), flush=True)
    sock.close(linger=10_000)  # the echo's last reply must leave before the socket closes
    ctx.term()


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds over all the jobs (timed iterations pooled)")
    parser.add_argument("--jobs", default="", help="comma-separated job names to run (default: all; gloo always)")
    parser.add_argument("--numel", type=int, default=NUMEL)
    parser.add_argument("--role", default="main")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--malloc-tune", action="store_true")
    parser.add_argument("--buffer", action="store_true", help="ps-worker: push from the key's KVStore.buffer")
    args = parser.parse_args()
    if args.role == "ps-worker":
        return ps_worker(args)
    if args.role == "gloo":
        return gloo_rank(args)
    if args.role.startswith("zmq-"):
        return zmq_side(args)

    mb = args.numel * 4 / 1e6
    print(
        f"pushpull / all_reduce of {args.numel} float32 ({mb:.0f} MB), {args.warmup} warm-up + {args.iters} timed "
        f"per job, {args.repeat} rounds over the jobs"
    )
    jobs = {
        "raw_zmq_roundtrip": lambda: raw_zmq(args, tune=True),
        "raw_zmq_untuned_malloc": lambda: raw_zmq(args, tune=False),
        "gloo_allreduce": lambda: gloo(args),
        "clipflow_tcp_1server": lambda: clipflow(1, args, "tcp"),
        "clipflow_tcp_2servers": lambda: clipflow(2, args, "tcp"),
        "clipflow_2hosts_1server": lambda: clipflow(1, args, "2hosts"),
        "clipflow_2hosts_1server_buffer": lambda: clipflow(1, args, "2hosts", buffer=True),
        "clipflow_2hosts_2servers": lambda: clipflow(2, args, "2hosts"),
        "clipflow_2hosts_2servers_buffer": lambda: clipflow(2, args, "2hosts", buffer=True),
        "clipflow_1host_shm": lambda: clipflow(2, args, "shm"),
    }
    if args.jobs:
        wanted = {"gloo_allreduce", *args.jobs.split(",")}
        unknown = wanted - set(jobs)
        if unknown:
            parser.error(f"unknown jobs {sorted(unknown)}; known: {', '.join(jobs)}")
        jobs = {name: job for name, job in jobs.items() if name in wanted}
    # every job runs once per repeat, in turn, so a slow spell on a shared machine hits them all alike
    runs: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.repeat):
        for name, job in jobs.items():
            runs[name] += job()
    med = {name: statistics.median(ms) for name, ms in runs.items()}
    print(f"{'what':<32}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'x gloo':>8}")
    for name, ms in runs.items():
        ratio = med[name] / med["gloo_allreduce"]
        print(f"{name:<32}{med[name]:>11.1f}{min(ms):>9.1f}{max(ms):>9.1f}{ratio:>8.2f}")
    figures = {f"{name}_ms": round(v, 1) for name, v in med.items()}
    for name in runs:
        if name.startswith("clipflow"):
            figures[f"ratio_{name}_vs_gloo"] = round(med[name] / med["gloo_allreduce"], 2)
    figures["numel"] = args.numel
    figures["timed_per_job"] = args.iters * args.repeat
    figures["cpus"] = os.cpu_count()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
