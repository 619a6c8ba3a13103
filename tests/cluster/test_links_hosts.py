"""The link check of `clipflow cluster check` between three sshd hosts in network namespaces (tests/netns_hosts.py):
the pairs' links, and the all-reduce across the plan's three workers with each back end.

One pair of hosts is slowed with tc inside both of its namespaces: an htb qdisc (its default 0 lets unclassified
packets through unshaped) with one 20 Mbit/s class, and a u32 filter sending only the packets to the other host
of the pair there (htb, as this machine's kernel has neither prio nor netem). The other pairs keep their
unshaped veths. Every tc rule is removed at the end of the test, since the hosts are shared with the module's other
tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, free_port, python_env
from netns_hosts import NetnsHosts, ssh_hosts  # noqa: F401

from clipflow.cluster.allreduce import BYTES
from clipflow.models.builder import build_model
from clipflow.recipe import load_recipe

pytestmark = pytest.mark.hosts
SLOW = "20mbit"


def run(hosts: NetnsHosts, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` on the launching side (HOME = local_home, the admin agent)."""
    env = {**python_env(), "HOME": str(hosts.local_home), **hosts.agent_env}
    return subprocess.run(
        [sys.executable, "-m", "clipflow", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def plan(ssh_hosts: NetnsHosts, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The job's key authorised on the three hosts and a plan of a worker and a server on each, whose roles run
    this checkout's clipflow."""
    work = tmp_path_factory.mktemp("links")
    hosts_file = work / "hosts"
    hosts_file.write_text("".join(f"{h.target}\n" for h in ssh_hosts.hosts))
    python = work / "python-under-test"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={REPO / "src"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    ssh = ["--ssh-key", str(ssh_hosts.local_home / ".ssh" / "id_ed25519"), "--known-hosts", str(work / "known_hosts")]
    done = run(ssh_hosts, "cluster", "keys", "--hosts-file", str(hosts_file), *ssh)
    assert done.returncode == 0, done.stdout + done.stderr
    out = work / "plan.json"
    args = ["--launcher", "ssh", "--hosts-file", str(hosts_file), "--num-workers", "3", "--num-servers", "3"]
    done = run(ssh_hosts, "cluster", "plan", *args, "--root-port", str(free_port()), *ssh, "--python", str(python),
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def tc(hosts: NetnsHosts, i: int, *args: str) -> subprocess.CompletedProcess:
    return hosts.run_in(i, ["tc", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def slow_pair(ssh_hosts: NetnsHosts) -> Iterator[tuple[int, int]]:  # noqa: F811
    """Hosts 0 and 1 joined at 20 Mbit/s each way; their links to host 2 untouched."""
    pair = (0, 1)
    try:
        for i, j in (pair, pair[::-1]):
            other = ssh_hosts.hosts[j].address
            for args in (
                ["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb"],
                ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", SLOW, "ceil", SLOW,
                 "quantum", "1514"],
                ["filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
                 "dst", f"{other}/32", "flowid", "1:20"],
            ):  # fmt: skip
                done = tc(ssh_hosts, i, *args)
                if done.returncode != 0:
                    pytest.skip(f"cannot shape a link here (tc {' '.join(args)}: {done.stderr.strip()})")
        yield pair
    finally:
        for i in pair:
            tc(ssh_hosts, i, "qdisc", "del", "dev", "eth0", "root")
        for i in range(3):
            assert "htb" not in tc(ssh_hosts, i, "qdisc", "show", "dev", "eth0").stdout


def test_the_link_check_names_the_one_slow_pair(
    ssh_hosts: NetnsHosts,  # noqa: F811
    plan: Path,
    slow_pair: tuple[int, int],
    tmp_path: Path,
) -> None:
    out = tmp_path / "checks.json"
    done = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--recipe", "slowfast_tiny_synthetic",
               "--kvstore", "dist_sync_device", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    links = json.loads(out.read_text())["links"]
    names = [h.target for h in ssh_hosts.hosts]
    slow = {names[slow_pair[0]], names[slow_pair[1]]}
    assert links["measured"] and len(links["pairs"]) == 3, links
    figures = {frozenset((p["a"], p["b"])): p for p in links["pairs"]}
    assert figures[frozenset(slow)]["gbit_s"] < 0.03, links  # 20 Mbit/s shaped (tc's rate counts IP bytes)
    assert all(p["gbit_s"] > 0.1 for k, p in figures.items() if k != slow), links  # the unshaped veths
    assert all(0 < p["latency_ms"] for p in links["pairs"]), links
    assert [{s["a"], s["b"]} for s in links["straggler"]] == [slow], links
    a, b = sorted(slow)
    assert f"likely straggler: {a} <-> {b}" in done.stdout, done.stdout
    for p in links["pairs"]:  # the console's table has a row per pair
        assert f"{p['a']} <-> {p['b']}" in done.stdout, done.stdout

    # the prediction: the slowest host link is the slow pair's; the model's gradient; a timed step
    prediction = links["prediction"]
    assert prediction["gbit_s"] == figures[frozenset(slow)]["gbit_s"], prediction
    model = build_model(load_recipe("slowfast_tiny_synthetic")["model"])
    grad = 4 * sum(p.numel() for p in model.parameters())
    assert prediction["grad_bytes"] == grad and prediction["compute_measured"] and prediction["compute_s"] > 0
    assert (prediction["hosts"], prediction["workers_per_host"], prediction["uses"]) == (3, 1, "ps-host")
    ps_host = prediction["backends"]["ps-host"]
    assert ps_host["bytes_per_host"] == 2 * 2 / 3 * grad  # what a ring over the hosts sends
    assert ps_host["exchange_s"] > ps_host["bytes_per_host"] * 8 / (prediction["gbit_s"] * 1e9)  # plus latency
    assert "predicted step (3 hosts x 1 workers" in done.stdout and "<- this run" in done.stdout, done.stdout

    # the all-reduce on the run's back end (ps, dist_sync_device) across the three workers, the slow pair included
    assert_summed(links["allreduce"], "ps", "dist_sync_device", done.stdout)


def assert_summed(allreduce: dict, backend: str, mode: str, console: str) -> None:
    """The check's all-reduce ran on ``backend`` across the plan's three workers and summed what it was asked to."""
    assert allreduce["ok"] and allreduce["note"] == "", allreduce
    assert (allreduce["backend"], allreduce["mode"], allreduce["workers"]) == (backend, mode, 3), allreduce
    assert allreduce["bytes"] == BYTES and allreduce["seconds"] > 0, allreduce  # the bytes worker 0 reduced
    assert allreduce["factor"] == 2 * 2 / 3  # a ring's bytes on each worker's link, 3 workers
    assert allreduce["gbit_s"] == BYTES * allreduce["factor"] * 8 / allreduce["seconds"] / 1e9, allreduce
    assert f"all-reduce ({backend} {mode}, 3 workers, 4.19 MB): " in console and "Gbit/s bus bandwidth" in console
    assert "clipflow cluster: all-reduce failed" not in console


def test_the_link_check_sums_across_all_workers_with_ddp(ssh_hosts: NetnsHosts, plan: Path,  # noqa: F811
                                                         tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "checks.json"
    done = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--backend", "ddp", "--link-check-s", "0.1",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert_summed(json.loads(out.read_text())["links"]["allreduce"], "ddp", "gloo", done.stdout)
    assert (tmp_path / "allreduce_logs" / "worker-2.log").is_file()  # the roles' logs, beside checks.json


def test_an_all_reduce_that_fails_is_a_note_naming_the_cause(ssh_hosts: NetnsHosts, plan: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:  # fmt: skip
    """A plan whose CURVE key folder is gone (the host checks do not read it; the roles do): the stage passes, the
    all-reduce's note names the role that failed, its host and the missing folder."""
    job = json.loads(plan.read_text())
    assert job["security"] == "curve", job  # auto, with the scheduler beyond loopback
    job["keys_dir"] = str(tmp_path / "no_keys")
    (tmp_path / "plan.json").write_text(json.dumps(job))
    out = tmp_path / "checks.json"
    done = run(ssh_hosts, "cluster", "check", "--plan", str(tmp_path / "plan.json"), "--link-check-s", "0.1",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    links = json.loads(out.read_text())["links"]
    allreduce = links["allreduce"]
    assert links["measured"] and not allreduce["ok"] and allreduce["seconds"] is None, allreduce
    hosts = "|".join(re.escape(h) for h in job["hosts"])
    assert re.match(rf"all-reduce failed: (scheduler|server|worker) \d on ({hosts}) failed \(exit code 2\)",
                    allreduce["note"]), allreduce  # fmt: skip
    assert f"CLIPFLOW_PS_KEYS={tmp_path / 'no_keys'} is not a folder" in allreduce["note"], allreduce
    assert "all-reduce (ps dist_sync, 3 workers, 4.19 MB): all-reduce failed: " in done.stdout, done.stdout


def test_the_link_check_can_be_skipped(ssh_hosts: NetnsHosts, plan: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "checks.json"
    done = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--no-link-check", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    links = json.loads(out.read_text())["links"]
    assert links == {"measured": False, "note": "skipped (cluster.link_check: false)", "seconds": 0.0, "pairs": [],
                     "straggler": [], "prediction": None, "allreduce": None}  # fmt: skip
    assert "links: skipped" in done.stdout
    assert "<->" not in done.stdout


def test_one_host_has_no_link_to_measure(ssh_hosts: NetnsHosts, plan: Path, tmp_path: Path) -> None:  # noqa: F811
    one = json.loads(plan.read_text())
    one["hosts"] = one["hosts"][:1]
    one["roles"] = [r for r in one["roles"] if r["host"] == one["hosts"][0]]
    (tmp_path / "plan.json").write_text(json.dumps(one))
    out = tmp_path / "checks.json"
    done = run(ssh_hosts, "cluster", "check", "--plan", str(tmp_path / "plan.json"), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    links = json.loads(out.read_text())["links"]
    assert (links["measured"], links["pairs"], links["note"]) == (
        False,
        [],
        "one host: no link between hosts to measure",
    )
    assert "links: one host: no link between hosts to measure" in done.stdout
