"""Scaling across hosts on shaped links: ps (with and without per-host aggregation) against ddp/gloo.

Hosts are network namespaces on this machine, each joined to one bridge by a veth pair (``eth0`` inside the
host). Both ends of every veth are shaped with ``tc`` (an htb class at the stated rate): what a host sends is
limited on its own side, what it receives on the bridge's side, so each host has the stated bandwidth both ways,
as a full-duplex NIC. ``--latency-ms`` adds a one-way delay (a netem qdisc under each htb class, half on each
side) where the kernel has netem; this machine's kernel has not (CONFIG_NET_SCH_NETEM off: only htb, tbf and
ingress), so the default adds none and the bench measures the link's own latency (half the median round trip
of a small message between hosts 1 and 2, about 0.01 ms) and predicts with it. Every host runs 2 workers (one
per GPU of a real machine); the parameter server has one server per host and its scheduler on host 1; gloo's
ranks are grouped by host. Processes start with ``ip netns exec``; the namespaces, links and processes are
removed afterwards, also on Ctrl-C, SIGTERM or a failure (and leftovers of a killed run on the next start).

A step is the compute, a sleep (this machine has 2 cores: real math would measure the CPU, not the links),
then the exchange of every gradient bucket, timed: one ``KVStore.pushpull`` of all buckets for ``ps``
(``dist_sync``) and ``ps-host`` (``dist_sync_device``, the host's workers summed first), one asynchronous gloo
``all_reduce`` per bucket, all then awaited, for ``ddp``.

The setting, chosen so that the exchange weighs against the compute as on the documents' cluster:

* Gradient: SlowFast 4x16 R50 (clipflow's ``slowfast_4x16_resnet50``, 400 classes): 34,480,216 float32,
  138 MB, in the 28 buckets clipflow's trainer makes of it (:func:`clipflow.train.buckets.make_buckets`, 2 MiB
  buckets). The bench scales every bucket down by ``--scale`` (default 10: 13.8 MB), and the split-over-servers
  bound (``MXNET_KVSTORE_BIGARRAY_BOUND``, 1M elements) with it, so the same buckets stay whole or are split.
* The documents' cluster: p3.16xlarge machines, 8 V100 each, 25 Gbit/s links, 8 clips per GPU per step.
  Compute per step of one V100: the GluonCV tutorial gives 196 epochs of Kinetics-400 (about 240K clips) in
  "more than 10 days" on one 8-V100 server: 240e3 x 196 / (8 GPUs x 8 clips) = 735K steps in 864,000 s, 1.18 s
  a step; its 8-machine run (1.5 days at the stated 0.75 efficiency) gives 0.75 x 1.41 s = 1.06 s. 1.18 s is
  taken (the one-machine figure has no exchange in it; it includes data loading, as a real step does).
* The ratio to keep: the time the gradient takes on a link over the compute, (138e6 B x 8 / 25 Gbit/s) /
  1.18 s = 0.0441 s / 1.18 s = 0.0374. The bench's defaults: 13.8 MB, 4 s of compute, 0.74 Gbit/s links:
  0.149 s / 4 s = 0.0373. The latency weighs nothing at this step length: a placement group's 0.05-0.1 ms,
  even stretched by the bench's longer step (4 s / 1.18 s), is 2 x 0.3 ms a step for the parameter server and
  2 (P-1) x 0.3 ms for gloo's ring (P = 6: 3 ms), against 4 s. The printed header gives the ratio of the run.

With these, the bound (:func:`clipflow.cluster.step_prediction.predict_step`) allows at 3 hosts: per-host
aggregation 0.953 (exchange 2 x 2/3 x 0.149 s against 4 s of compute; the same with 8 workers a host), ps
without it 0.910 (2 workers a host; with 8, as on a p3.16xlarge, 0.716), ddp 0.942 (6 ranks; 24 ranks, 8 a
host, 0.931).

Before the runs, the cluster stage's link check (:mod:`clipflow.cluster.links`) between every pair of hosts: its
probe's server in each namespace, its client in the pair's first one, one pair at a time, for the schema's
``cluster.link_check_s`` each way; its table (the pair far below the others named, if any) and its prediction
for all the hosts, as the cluster stage prints them before training. Each run is then predicted twice: from the
shaped rate and the measured latency above (the bound), and as the link check predicts it, from the slowest
measured link among the run's hosts and their highest latency (what a user sees before training; the measured
step over it is the link check's accuracy).

Figures per run and host count: the step time (each worker's median over the timed steps, the mean over the
workers; the slowest worker's per step, median over the steps, in the JSON), the exchange part of it, the
scaling efficiency (the same back end's one-host step time over this one: every worker does the same work),
the bytes each host sent per step counted on its link (``eth0``'s tx_bytes inside the host, read after a
barrier before and after the timed steps, over the steps; the mean and the largest host), the prediction
(step time, efficiency, bytes), and the ratios: bytes per host over 2(N-1)/N of the gradient (a ring
all-reduce over the hosts), each run's step time over ddp's, the measured step over the predicted one and the
measured exchange over the predicted one (the part the model is about); the same two over the link check's
prediction, with its step time and efficiency. The JSON keeps the link check's pairs under ``link_check``.
A table, then one JSON line; ``--out`` writes the JSON to a file as well.

Usage (root: namespaces and tc): ``.venv/bin/python bench/cluster_scaling.py [--hosts 1,2,3] [--runs
ps,ps-host,ddp] [--scale 10] [--compute-s 4] [--gbit 0.74] [--latency-ms 0] [--steps 6] [--warmup 1]
[--out FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ps_throughput import run_procs  # bench/ is the script's own folder, first on sys.path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
WORKERS_PER_HOST = 2
MODES = {"ps": "dist_sync", "ps-host": "dist_sync_device"}
BIGARRAY_BOUND = 1_000_000  # MXNET_KVSTORE_BIGARRAY_BOUND's default, scaled with the buckets
NAME_RE = re.compile(r"^cb(\d+)(?:h\d+|br|v\d+)$")  # cb<pid>h1 (namespace), cb<pid>v1 (veth), cb<pid>br (bridge)


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def model_buckets(scale: int) -> list[int]:
    """Element counts of the trainer's buckets of SlowFast 4x16 R50, each divided by ``scale`` (at least 1)."""
    from clipflow.models.builder import build_model
    from clipflow.train.buckets import DEFAULT_BUCKET_BYTES, make_buckets, trainable

    model = build_model({"name": "slowfast_4x16_resnet50", "num_classes": 400})
    buckets = make_buckets(trainable(model, "cluster_scaling"), None, DEFAULT_BUCKET_BYTES, 0)
    return [max(1, b.numel // scale) for b in buckets]


# -- hosts: namespaces, a bridge, shaped veths ----------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def remove_leftovers() -> None:
    """Namespaces and links of earlier runs of this bench whose process is gone (killed before it cleaned up)."""
    netns = [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0] for line in sh("ip", "-o", "link").stdout.splitlines()]
    for name in netns + links:
        match = NAME_RE.match(name)
        if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
            if name in netns:
                for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                sh("ip", "netns", "delete", name, check=False)
            else:
                sh("ip", "link", "delete", name, check=False)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.220.0.0/16 that no address or route of this machine overlaps."""
    used = []
    for line in sh("ip", "-4", "-o", "addr").stdout.splitlines() + sh("ip", "-4", "route").stdout.splitlines():
        for word in re.findall(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?", line):
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(word, strict=False))
    for n in range(256):
        net = ipaddress.IPv4Network(f"10.220.{(os.getpid() + n) % 256}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 10.220.0.0/16 for the bench's hosts")


def shape(dev: str, gbit: float, delay_ms: float, netns: str | None = None) -> None:
    """Egress of ``dev``: an htb class at ``gbit``, with a netem delay of ``delay_ms`` under it when > 0."""
    pre = ["ip", "netns", "exec", netns] if netns else []
    rate = f"{gbit * 1000:.3f}mbit"
    sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
    sh(*pre, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
       "burst", "256k", "cburst", "256k")  # fmt: skip
    if delay_ms > 0:
        done = sh(*pre, "tc", "qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "netem", "delay",
                  f"{delay_ms * 1000:.0f}us", "limit", "100000", check=False)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"--latency-ms needs tc's netem, which failed here ({done.stderr.strip()}); "
                             "use --latency-ms 0: the link's own latency is measured")  # fmt: skip


class Hosts:
    """``count`` namespace hosts on one bridge, links shaped; a context manager that removes all it made."""

    def __init__(self, count: int, gbit: float, latency_ms: float) -> None:
        self.count, self.gbit, self.latency_ms = count, gbit, latency_ms
        self.tag = f"cb{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.names = [f"{self.tag}h{i + 1}" for i in range(count)]
        self.veths = [f"{self.tag}v{i + 1}" for i in range(count)]
        self.addresses: list[str] = []
        self._made_netns: list[str] = []
        self._made_links: list[str] = []

    def __enter__(self) -> Hosts:
        try:
            remove_leftovers()
            net = free_subnet()
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            self._made_links.append(self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
            for i, (name, veth) in enumerate(zip(self.names, self.veths, strict=True)):
                address = str(net.network_address + 11 + i)
                sh("ip", "netns", "add", name)
                self._made_netns.append(name)
                sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
                self._made_links.insert(0, veth)
                sh("ip", "link", "set", veth, "master", self.bridge, "up")
                sh("ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
                sh("ip", "-n", name, "link", "set", "eth0", "up")
                sh("ip", "-n", name, "link", "set", "lo", "up")
                shape("eth0", self.gbit, self.latency_ms / 2, netns=name)  # what the host sends
                shape(veth, self.gbit, self.latency_ms / 2)  # what it receives
                self.addresses.append(address)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for name in self._made_netns:
            for _ in range(50):
                pids = sh("ip", "netns", "pids", name, check=False).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.05)
        for link in self._made_links:  # veths first (a veth's peer goes with it), the bridge last
            sh("ip", "link", "delete", link, check=False)
        for name in self._made_netns:
            sh("ip", "netns", "delete", name, check=False)
        self._made_links, self._made_netns = [], []

    def argv(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], *argv]


# -- one run: a back end on N hosts -----------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PS_", "MXNET_", "CLIPFLOW_"))}
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**clean, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def worker_argv(args: argparse.Namespace, role: str) -> list[str]:
    sizes = ["--sizes", ",".join(map(str, args.sizes)), "--compute-s", str(args.compute_s)]
    return [sys.executable, __file__, "--role", role, "--warmup", str(args.warmup), "--steps", str(args.steps), *sizes]


def run_once(hosts: Hosts, n: int, backend: str, args: argparse.Namespace, port: int) -> dict:
    """``backend`` on the first ``n`` hosts; per-worker results (rank 0 first)."""
    w = WORKERS_PER_HOST
    if backend == "ddp":
        base = child_env(GLOO_SOCKET_IFNAME="eth0", BENCH_CLIPFLOW_ROOT=f"{hosts.addresses[0]}:{port}")
        cmds = [
            (hosts.argv(h, [*worker_argv(args, "ddp-rank"), "--rank", str(h * w + j), "--world", str(n * w)]), base)
            for h in range(n)
            for j in range(w)
        ]
        outs = run_procs(cmds, args.timeout)
    else:
        base = child_env(
            DMLC_PS_ROOT_URI=hosts.addresses[0],
            DMLC_PS_ROOT_PORT=str(port),
            DMLC_NUM_SERVER=str(n),
            DMLC_NUM_WORKER=str(n * w),
            MXNET_KVSTORE_BIGARRAY_BOUND=str(max(1, BIGARRAY_BOUND // args.scale)),
            CLIPFLOW_PS_SECURITY="none",
            CLIPFLOW_PS_INSECURE="1",  # the hosts' own bridge, nothing else can reach it
            CLIPFLOW_STARTUP_TIMEOUT="120",
        )
        role = [sys.executable, "-c", "import sys; from clipflow.ps import run_role; sys.exit(run_role())"]
        cmds = [(hosts.argv(h, [*worker_argv(args, "ps-worker"), "--mode", MODES[backend]]),
                 {**base, "DMLC_NODE_HOST": hosts.addresses[h], "DMLC_ROLE": "worker", "DMLC_RANK": str(h * w + j)})
                for h in range(n) for j in range(w)]  # fmt: skip
        cmds.append((hosts.argv(0, role), {**base, "DMLC_NODE_HOST": hosts.addresses[0], "DMLC_ROLE": "scheduler"}))
        cmds += [
            (hosts.argv(h, role), {**base, "DMLC_NODE_HOST": hosts.addresses[h], "DMLC_ROLE": "server",
                                   "DMLC_RANK": str(h)})
            for h in range(n)
        ]  # fmt: skip
        outs = run_procs(cmds, args.timeout)[: n * w]
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def one_way_ms(hosts: Hosts, args: argparse.Namespace, port: int) -> float:
    """Half the median round trip of a 64-byte message from host 1 to host 2 and back (TCP, no delay)."""
    me = [sys.executable, __file__, "--role"]
    target = ["--peer", f"{hosts.addresses[1]}:{port}"]
    outs = run_procs([(hosts.argv(1, [*me, "echo", *target]), child_env()),
                      (hosts.argv(0, [*me, "rtt", *target]), child_env())], args.timeout)  # fmt: skip
    return json.loads(outs[1])["rtt_ms"] / 2


def link_check(hosts: Hosts, timeout: float):  # noqa: ANN201 (clipflow's LinkCheck, imported in main)
    """The cluster stage's link check between every pair of the hosts, as :func:`clipflow.cluster.links.measure_links`
    runs it over ssh: the probe's server in each namespace, then, one pair at a time, the probe's client in the
    pair's first namespace measuring to the second, with the request and the seconds the link check uses (the
    schema's ``cluster.link_check_s``). The pairs, and the one far below the others if any."""
    from clipflow.cluster import links
    from clipflow.cluster.link_probe import REPLY
    from clipflow.schemas import config_defaults

    seconds = float(config_defaults("cluster")["link_check_s"])
    names = [f"h{i + 1}" for i in range(hosts.count)]
    servers: list[subprocess.Popen] = []
    try:
        ports = []
        for i in range(hosts.count):
            argv = hosts.argv(i, links.server_argv(sys.executable, links.server_bound(hosts.count, seconds)))
            servers.append(subprocess.Popen(argv, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True))  # fmt: skip
            line = next((x for x in servers[-1].stdout if x.startswith(REPLY)), "")
            if not line:
                raise RuntimeError(f"the link probe's server on {names[i]} printed no port")
            ports.append(int(json.loads(line.removeprefix(REPLY))["port"]))
        pairs = []
        for a, b in itertools.combinations(range(hosts.count), 2):
            request = links.probe_request(hosts.addresses[b], ports[b], seconds)
            client = hosts.argv(a, [sys.executable, "-c", links.PROBE])
            done = subprocess.run(
                client, env=child_env(), input=json.dumps(request), capture_output=True, text=True, timeout=timeout
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith(REPLY)), None)
            if done.returncode != 0 or line is None:
                raise RuntimeError(f"the link probe from {names[a]} to {names[b]} failed: {done.stderr[-2000:]}")
            pairs.append(links.link_figures(names[a], names[b], json.loads(line.removeprefix(REPLY))))
    finally:
        for server in servers:
            server.stdin.close()  # the probe's server ends when its stdin closes
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return links.LinkCheck(True, "", seconds, pairs, links.stragglers(pairs))


def link_check_prediction(pairs: list[dict], n: int, backend: str, grad: int, compute_s: float) -> dict:
    """The link check's prediction for ``backend`` on the first ``n`` hosts, from its pairs among them (the
    slowest link and latency: :func:`clipflow.cluster.prediction.predict_shape`); on one host nothing is measured
    and nothing crosses a link: the compute alone."""
    from clipflow.cluster.prediction import predict_shape
    from clipflow.cluster.step_prediction import PlanShape

    mine = {f"h{i + 1}" for i in range(n)}
    among = [p for p in pairs if p["a"] in mine and p["b"] in mine]
    if not among:
        return {"gbit_s": None, "latency_ms": None, "step_s": compute_s, "exchange_s": 0.0, "efficiency": 1.0}
    got = predict_shape(PlanShape(n, WORKERS_PER_HOST), among, grad, compute_s, backend)
    return {"gbit_s": round(got["gbit_s"], 4), "latency_ms": round(got["latency_ms"], 4), **got["backends"][backend]}


def echo_or_rtt(args: argparse.Namespace, rounds: int = 300) -> None:
    import socket

    address, port = args.peer.rsplit(":", 1)
    if args.role == "echo":
        with socket.create_server((address, int(port))) as server:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(rounds):
                conn.sendall(conn.recv(64, socket.MSG_WAITALL))
        print("{}")
        return
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((address, int(port)), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        conn.sendall(b"x" * 64)
        conn.recv(64, socket.MSG_WAITALL)
        times.append((time.perf_counter() - start) * 1000)
    print(json.dumps({"rtt_ms": statistics.median(times)}))


def tx_bytes() -> int:
    """Bytes this host has sent on its link (``eth0`` of its namespace; ``ip netns exec`` mounts its /sys)."""
    path = Path("/sys/class/net/eth0/statistics/tx_bytes")
    return int(path.read_text()) if path.exists() else 0


def timed_steps(args: argparse.Namespace, exchange, barrier) -> dict:  # noqa: ANN001
    """Warm-up and timed steps; step and exchange times (s), and this host's link bytes over the timed steps."""
    for _ in range(args.warmup):
        time.sleep(args.compute_s)
        exchange()
    barrier()
    sent0 = tx_bytes()
    steps, exchanges = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        time.sleep(args.compute_s)
        mid = time.perf_counter()
        exchange()
        end = time.perf_counter()
        steps.append(end - start)
        exchanges.append(end - mid)
    barrier()
    return {"step_s": steps, "exchange_s": exchanges, "tx_bytes": tx_bytes() - sent0}


def ps_worker(args: argparse.Namespace) -> None:
    import torch

    from clipflow.ps import KVStore

    sizes = args.sizes
    kv = KVStore.create(args.mode)
    keys = list(range(len(sizes)))
    for k, numel in zip(keys, sizes, strict=True):
        kv.init(k, torch.zeros(numel))
    grads = [kv.buffer(k) for k in keys]  # as the trainer's buckets: shared with a server on this host
    for g in grads:
        g.fill_(1.0)

    def exchange() -> None:
        for g in grads:
            g.fill_(1.0)
        kv.pushpull(keys, grads, grads)

    result = timed_steps(args, exchange, kv.barrier)
    want = float(kv.num_workers)
    assert all(float(g[0]) == want and float(g[-1]) == want for g in grads), "wrong sum"
    kv.close()
    print(json.dumps({**result, "grad_bytes": 4 * sum(sizes), "buckets": len(sizes)}), flush=True)


def ddp_rank(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    sizes = args.sizes
    root = os.environ["BENCH_CLIPFLOW_ROOT"]
    dist.init_process_group("gloo", init_method=f"tcp://{root}", rank=args.rank, world_size=args.world)
    grads = [torch.ones(numel) for numel in sizes]

    def exchange() -> None:
        for g in grads:
            g.fill_(1.0)
        works = [dist.all_reduce(g, async_op=True) for g in grads]
        for work in works:
            work.wait()

    result = timed_steps(args, exchange, dist.barrier)
    assert all(float(g[0]) == args.world for g in grads), "wrong sum"
    dist.destroy_process_group()
    print(json.dumps({**result, "grad_bytes": 4 * sum(sizes), "buckets": len(sizes)}), flush=True)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# -- figures ---------------------------------------------------------------------------------------------------


def summarize(results: list[dict], n: int) -> dict:
    """Step and exchange time: each worker's median over the timed steps, then the mean over the workers (in a
    synchronous exchange every worker steps at the same pace; one that got its last reply first waits longest
    in the next exchange). Also the slowest worker's step, per step, then the median over the steps. Bytes: per
    host, per step."""
    steps = [max(r["step_s"][i] for r in results) for i in range(len(results[0]["step_s"]))]
    per_host = [results[h * WORKERS_PER_HOST]["tx_bytes"] / len(steps) for h in range(n)]
    return {
        "step_s": statistics.mean(statistics.median(r["step_s"]) for r in results),
        "exchange_s": statistics.mean(statistics.median(r["exchange_s"]) for r in results),
        "step_s_slowest": statistics.median(steps),
        "bytes_per_host": statistics.mean(per_host),
        "bytes_per_host_max": max(per_host),
        "grad_bytes": results[0]["grad_bytes"],
        "buckets": results[0]["buckets"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,2,3", help="host counts to run, e.g. 1,2,3 (1 is the baseline)")
    parser.add_argument("--runs", default="ps,ps-host,ddp", help="back ends: ps, ps-host, ddp")
    parser.add_argument("--scale", type=int, default=10, help="divide every gradient bucket by this")
    parser.add_argument("--compute-s", type=float, default=4.0, help="a worker's compute per step (a sleep)")
    parser.add_argument("--gbit", type=float, default=0.74, help="each host's link, both ways, Gbit/s")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="one-way delay to add between two hosts (netem; 0: none, the link's own is measured)",
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="steps before the timed ones")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    parser.add_argument("--out", type=Path, help="also write the JSON figures here")
    parser.add_argument("--role", default="main", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="dist_sync", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "ps-worker":
        return ps_worker(args)
    if args.role == "ddp-rank":
        return ddp_rank(args)
    if args.role in ("echo", "rtt"):
        return echo_or_rtt(args)

    from dataclasses import asdict

    from clipflow.cluster.links import format_links
    from clipflow.cluster.prediction import format_prediction, predict_shape
    from clipflow.cluster.step_prediction import PlanShape, predict_step
    from clipflow.hosts.ports import free_port

    counts = sorted({int(c) for c in args.hosts.split(",")} | {1})
    runs = args.runs.split(",")
    if unknown := set(runs) - {"ps", "ps-host", "ddp"}:
        parser.error(f"unknown back ends {sorted(unknown)}; known: ps, ps-host, ddp")
    if os.geteuid() != 0:
        parser.error("the bench makes network namespaces and shapes links with tc: run it as root")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a plain kill cleans up too (through the with-block)

    sizes = args.sizes = model_buckets(args.scale)  # the children get the sizes: one model build, not 2N
    grad = 4 * sum(sizes)
    link_s = grad * 8 / (args.gbit * 1e9)
    print(
        f"SlowFast 4x16 R50's gradient / {args.scale}: {grad / 1e6:.2f} MB in {len(sizes)} buckets; "
        f"{WORKERS_PER_HOST} workers a host; links {args.gbit} Gbit/s both ways, {args.latency_ms} ms one way; "
        f"compute {args.compute_s} s a step (a sleep); gradient on a link / compute = {link_s / args.compute_s:.4f} "
        f"(documents' cluster: 0.0374); {args.warmup} warm-up + {args.steps} timed steps",
        flush=True,
    )
    figures: dict = {"bench": "cluster_scaling", "scale": args.scale, "grad_bytes": grad, "buckets": len(sizes),
                     "gbit": args.gbit, "latency_ms": args.latency_ms, "compute_s": args.compute_s,
                     "workers_per_host": WORKERS_PER_HOST, "steps": args.steps, "cpus": os.cpu_count(),
                     "ratio_link_to_compute": round(link_s / args.compute_s, 4), "runs": {}}  # fmt: skip
    measured: dict[tuple[str, int], dict] = {}
    latency_ms = args.latency_ms
    pairs: list[dict] = []
    with Hosts(max(counts), args.gbit, args.latency_ms) as hosts:
        if max(counts) > 1:
            latency_ms = one_way_ms(hosts, args, free_port())
            figures["measured_latency_ms"] = round(latency_ms, 4)
            print(f"one-way latency between hosts 1 and 2 (half the median round trip): {latency_ms:.3f} ms")
            links = link_check(hosts, args.timeout)
            pairs = [asdict(p) for p in links.pairs]
            figures["link_check"] = links.to_dict()
            print(f"the link check ({links.seconds:g} s each way a pair):\n{format_links(links)}", flush=True)
            # what the cluster stage prints before training on all the hosts (every back end; "" marks none)
            whole = predict_shape(PlanShape(max(counts), WORKERS_PER_HOST), pairs, grad, args.compute_s, "")
            figures["link_check"]["prediction"] = whole
            print(format_prediction(whole), flush=True)
        # each back end's host counts in turn, the back ends interleaved: a slow spell hits them alike
        for n in counts:
            for backend in runs:
                measured[backend, n] = summarize(run_once(hosts, n, backend, args, free_port()), n)
                print(f"  {backend} on {n} host(s): {measured[backend, n]['step_s']:.3f} s a step", flush=True)

    head = (f"{'run':<9}{'hosts':>6}{'step s':>9}{'exch s':>8}{'eff':>7}{'MB/host':>9}{'MB max':>8}"
            f"{'pred s':>8}{'p.eff':>7}{'pred MB':>9}{'x ring':>8}{'x pred':>8}{'x p.ex':>8}{'x ddp':>7}"
            f"{'lc s':>8}{'lc eff':>7}{'x lc':>7}{'x lc.ex':>8}")  # fmt: skip
    print(head)
    for backend in runs:
        for n in counts:
            m = measured[backend, n]
            shape_ = PlanShape(n, WORKERS_PER_HOST)
            pred = predict_step(backend, shape_, grad, args.compute_s, args.gbit, latency_ms)
            eff = measured[backend, 1]["step_s"] / m["step_s"]
            ring = 2 * (n - 1) / n * grad
            lc = link_check_prediction(pairs, n, backend, grad, args.compute_s)
            row = {
                "step_s": round(m["step_s"], 4),
                "exchange_s": round(m["exchange_s"], 4),
                "step_s_slowest": round(m["step_s_slowest"], 4),
                "efficiency": round(eff, 4),
                "bytes_per_host": round(m["bytes_per_host"]),
                "bytes_per_host_max": round(m["bytes_per_host_max"]),
                "predicted_step_s": round(pred.step_s, 4),
                "predicted_efficiency": round(pred.efficiency, 4),
                "predicted_bytes_per_host": round(pred.bytes_per_host),
                "bytes_vs_ring": round(m["bytes_per_host"] / ring, 3) if n > 1 else None,
                "step_vs_predicted": round(m["step_s"] / pred.step_s, 3),
                "exchange_vs_predicted": round(m["exchange_s"] / pred.exchange_s, 3) if n > 1 else None,
                "step_vs_ddp": round(m["step_s"] / measured["ddp", n]["step_s"], 3) if "ddp" in runs else None,
                "link_check_gbit_s": lc["gbit_s"],
                "link_check_latency_ms": lc["latency_ms"],
                "link_check_predicted_step_s": round(lc["step_s"], 4),
                "link_check_predicted_exchange_s": round(lc["exchange_s"], 4),
                "link_check_predicted_efficiency": round(lc["efficiency"], 4),
                "step_vs_link_check": round(m["step_s"] / lc["step_s"], 3),
                "exchange_vs_link_check": round(m["exchange_s"] / lc["exchange_s"], 3) if n > 1 else None,
            }
            figures["runs"][f"{backend}_{n}"] = row
            print(f"{backend:<9}{n:>6}{m['step_s']:>9.3f}{m['exchange_s']:>8.3f}{eff:>7.3f}"
                  f"{m['bytes_per_host'] / 1e6:>9.2f}{m['bytes_per_host_max'] / 1e6:>8.2f}{pred.step_s:>8.3f}"
                  f"{pred.efficiency:>7.3f}{pred.bytes_per_host / 1e6:>9.2f}{fmt(row['bytes_vs_ring'], '8.2f'):>8}"
                  f"{row['step_vs_predicted']:>8.3f}{fmt(row['exchange_vs_predicted'], '8.2f'):>8}"
                  f"{fmt(row['step_vs_ddp'], '7.3f'):>7}{lc['step_s']:>8.3f}{lc['efficiency']:>7.3f}"
                  f"{row['step_vs_link_check']:>7.3f}{fmt(row['exchange_vs_link_check'], '8.2f'):>8}")  # fmt: skip
    print("eff: the one-host step over this one; x ring: bytes per host over 2(N-1)/N of the gradient; "
          "x pred: measured step over predicted; x p.ex: measured exchange over predicted; x ddp: step over "
          "ddp/gloo's on as many hosts; lc: predicted as the link check does, from its measured slowest link "
          "among the run's hosts (step s, efficiency); x lc, x lc.ex: measured step, exchange over those")  # fmt: skip
    line = json.dumps(figures)
    if args.out:
        args.out.write_text(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
