"""The link check: bandwidth and latency between every pair of the plan's hosts, over the job's own transport.

Every host runs the probe's server (:mod:`clipflow.cluster.link_probe`, ZeroMQ TCP on a free port, DEALER to
ROUTER as the parameter server talks), started through the ssh session the host checks use and stopped when that
session ends. Then, one pair at a time (so that no two measurements share a link), the first host of the pair
runs the probe's client against the second: a few pings, then ``seconds`` of chunks each way. A pair's bandwidth
is the slower of its two directions; its latency half the least round trip (the link's own delay: a host busy
with other work only ever adds to some round trips, and such a host is not a slow link). The whole check takes about
``2 x seconds`` plus a Python start per pair: a few seconds for a handful of hosts.

The likely straggler: a pair whose bandwidth is under half the median of all pairs' bandwidths, or whose latency
is over three times the median latency and at least 1 ms above it (so that the jitter of sub-millisecond links
names nothing). The median over all pairs (not over the others) keeps one slow pair from making a fast pair look
slow beside it. A host slow on every link shows as a median that low; see each host's slowest pair instead
(:func:`slowest_by_host`, what the step prediction uses). With one host there is no link and nothing measured.
"""

from __future__ import annotations

import json
import shlex
import statistics
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from pathlib import Path

import paramiko

from clipflow.cluster import link_probe
from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import Plan, address_of
from clipflow.hosts.remote_python import REPLY, RemoteScriptError, run_remote_python
from clipflow.hosts.ssh import connect

# the probe's own source, run with ``python -c``: the hosts need pyzmq (the roles do too), not this clipflow
PROBE = Path(link_probe.__file__).read_text(encoding="utf-8")
PINGS = 5
CHUNK = 256 * 1024  # bytes a message carries: large enough that the per-message cost stays small
SLOW_BANDWIDTH = 0.5  # of the median: a pair below it is named
SLOW_LATENCY = 3.0  # times the median, and at least LATENCY_FLOOR_MS above it
LATENCY_FLOOR_MS = 1.0


@dataclass
class LinkFigures:
    a: str
    b: str
    gbit_s: float  # the slower direction
    up_gbit_s: float  # a to b
    down_gbit_s: float  # b to a
    latency_ms: float  # one way: half the least round trip


@dataclass
class LinkCheck:
    measured: bool
    note: str = ""
    seconds: float = 0.0
    pairs: list[LinkFigures] = field(default_factory=list)
    straggler: list[dict] = field(default_factory=list)  # {"a", "b", "why"} for each pair far below the others
    prediction: dict | None = None  # the plan's step time per back end (clipflow.cluster.prediction)
    allreduce: dict | None = None  # one sum across all workers with the run's back end (clipflow.cluster.allreduce)

    def to_dict(self) -> dict:
        return asdict(self)


def stragglers(pairs: list[LinkFigures]) -> list[dict]:
    """The pairs far below the others, by the rule of the module's docstring, each with why."""
    if len(pairs) < 2:
        return []
    bandwidth = statistics.median(p.gbit_s for p in pairs)
    latency = statistics.median(p.latency_ms for p in pairs)
    named = []
    for p in pairs:
        why = []
        if p.gbit_s < SLOW_BANDWIDTH * bandwidth:
            why.append(f"{p.gbit_s:.3g} Gbit/s, under half the median {bandwidth:.3g}")
        if p.latency_ms > SLOW_LATENCY * latency and p.latency_ms > latency + LATENCY_FLOOR_MS:
            why.append(f"{p.latency_ms:.3g} ms, over {SLOW_LATENCY:g}x the median {latency:.3g}")
        if why:
            named.append({"a": p.a, "b": p.b, "why": "; ".join(why)})
    return named


def slowest_by_host(pairs: list[dict]) -> dict[str, dict]:
    """For each host of ``pairs`` (checks.json's form): the lowest bandwidth and highest latency of its links."""
    hosts: dict[str, dict] = {}
    for p in pairs:
        for h in (p["a"], p["b"]):
            worst = hosts.setdefault(h, {"gbit_s": p["gbit_s"], "latency_ms": p["latency_ms"]})
            worst["gbit_s"] = min(worst["gbit_s"], p["gbit_s"])
            worst["latency_ms"] = max(worst["latency_ms"], p["latency_ms"])
    return hosts


def host_address(plan: Plan, host: Host) -> str:
    """Where the other hosts reach ``host``: the address its roles advertise, else its name resolved here."""
    name = str(replace(host, slots=1))
    return next((r.address for r in plan.roles if r.host == name), None) or address_of(host)


def server_argv(python: str, seconds: float) -> list[str]:
    """The probe's server, answering for at most ``seconds`` (see :func:`server_bound`) or until its stdin closes."""
    return [python, "-c", PROBE, "serve", f"{seconds:g}"]


def server_bound(hosts: int, seconds: float) -> float:
    """How long a probe server may live: every pair of ``hosts`` measured, with room; its own end should the
    process that started it die without closing its stdin."""
    return 30 + hosts**2 * (4 * seconds + 10)


def probe_request(address: str, port: int, seconds: float) -> dict:
    """What the probe's client reads on its stdin to measure the link to the server at ``address``:``port``."""
    return {"address": address, "port": port, "seconds": seconds, "pings": PINGS, "chunk": CHUNK}


def link_figures(a: str, b: str, got: dict) -> LinkFigures:
    """The pair's figures from the probe client's answer (run on ``a``, measuring to ``b``)."""
    up, down = got["up_gbit_s"], got["down_gbit_s"]
    return LinkFigures(a, b, min(up, down), up, down, got["latency_ms"])


class _Server:
    """The probe's server on one host, alive while its ssh session is."""

    def __init__(self, conn, python: str, seconds: float) -> None:
        self.conn = conn
        argv = server_argv(python, seconds)
        self.stdin, self.stdout, self.stderr = conn.client.exec_command(shlex.join(argv), timeout=seconds)
        self.port = 0
        for line in self.stdout:
            if line.startswith(REPLY):
                self.port = int(json.loads(line.removeprefix(REPLY))["port"])
                break
        if not self.port:
            err = self.stderr.read().decode(errors="replace").strip().splitlines()
            raise RemoteScriptError(err[-1] if err else "the probe's server printed no port")

    def stop(self) -> None:
        try:
            self.stdin.channel.shutdown_write()
            self.stdout.channel.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException):
            pass


def measure_links(plan: Plan, seconds: float, log=print) -> LinkCheck:
    """Measures every pair of ``plan``'s hosts for ``seconds`` each way; ClipflowError naming a pair the probe
    could not measure (a link the job could not use either)."""
    hosts = plan.host_list()
    if len(hosts) < 2:
        return LinkCheck(False, "one host: no link between hosts to measure", seconds)
    settings = plan.ssh_settings()
    bound = server_bound(len(hosts), seconds)
    conns, servers = {}, {}
    try:
        for host in hosts:
            conns[str(host)] = conn = connect(host, settings)
            try:
                servers[str(host)] = _Server(conn, plan.python, bound)
            except (OSError, EOFError, paramiko.SSHException, RemoteScriptError) as exc:
                raise ClipflowError(f"link check: cannot start the probe on {host} ({exc})") from None
        pairs = []
        for a, b in combinations(hosts, 2):
            request = probe_request(host_address(plan, b), servers[str(b)].port, seconds)
            try:
                got = run_remote_python(conns[str(a)], plan.python, PROBE, request, 8 * seconds + 60)
            except RemoteScriptError as exc:
                raise ClipflowError(
                    f"link check: {a} cannot reach {b} at {request['address']}:{request['port']} over ZeroMQ TCP "
                    f"({exc.why}); the job's roles would not either: open the ports between the hosts"
                ) from None
            pairs.append(link_figures(str(a), str(b), got))
            log(f"clipflow cluster: link {a} <-> {b}: {pairs[-1].gbit_s:.3g} Gbit/s, {got['latency_ms']:.3g} ms")
    finally:
        for server in servers.values():
            server.stop()
        for conn in conns.values():
            conn.close()
    return LinkCheck(True, "", seconds, pairs, stragglers(pairs))


def format_links(check: LinkCheck) -> str:
    """The links as a console table, the straggler named below it."""
    if not check.measured:
        return f"links: {check.note}"
    rows = [("link", "Gbit/s", "a->b", "b->a", "latency ms", "")]
    slow = {(s["a"], s["b"]) for s in check.straggler}
    for p in check.pairs:
        rows.append((f"{p.a} <-> {p.b}", f"{p.gbit_s:.3g}", f"{p.up_gbit_s:.3g}", f"{p.down_gbit_s:.3g}",
                     f"{p.latency_ms:.3g}", "STRAGGLER" if (p.a, p.b) in slow else ""))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for s in check.straggler:
        lines.append(f"likely straggler: {s['a']} <-> {s['b']} ({s['why']})")
    if not check.straggler:
        lines.append("no pair far below the others")
    return "\n".join(lines)
