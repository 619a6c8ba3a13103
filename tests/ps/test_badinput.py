"""Bad input to the parameter server: malformed messages from a foreign process are dropped and logged naming
their sender while a real job on loopback trains to the end, and while it starts (only a ps-lite node's first
message ends a starting job); the decoder turns any bytes into a Message or a
WireError and nothing else; security none beyond loopback needs CLIPFLOW_PS_INSECURE=1, and then warns."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zmq
from helpers import assert_refused, clipflow
from ps_badinput_helpers import (
    BAD_FOR_SCHEDULER,
    BAD_FOR_SERVER,
    MARKER,
    drop_lines,
    listening_port,
    send_from_stranger,
)
from ps_cluster_helpers import HERE, Cluster, base_env
from ps_lite_helpers import MXNET_ADD_NODE, add_node

from clipflow.errors import ClipflowError, CommError
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import make_plan
from clipflow.launch.roles import role_commands
from clipflow.ps import PSConfig
from clipflow.ps.node import Registration, Welcome
from clipflow.ps.wire import MAX_DEPTH, Message, WireError, decode, encode

WORKER = [sys.executable, str(HERE / "ps_badinput_helpers.py")]
ROLE_CLI = [sys.executable, "-m", "clipflow", "ps", "role"]

# -- a real job under fire --------------------------------------------------------------------


def test_malformed_messages_are_dropped_and_logged_and_the_job_trains_to_the_end(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster(1, 2)
    scheduler, server = cluster.scheduler(), cluster.server()
    workers = [cluster.start(f"worker{i}", "worker", WORKER) for i in range(2)]
    server_port = listening_port(server.popen.pid)
    deadline = time.monotonic() + 40
    while not all((tmp_path / f"training-{rank}").exists() for rank in range(2)):  # the job runs
        assert time.monotonic() < deadline, [p.stderr() for p in cluster.procs]
        assert all(p.popen.poll() is None for p in cluster.procs), [p.stderr() for p in cluster.procs]
        time.sleep(0.1)
    ctx = zmq.Context()
    try:
        send_from_stranger(ctx, int(cluster.env["DMLC_PS_ROOT_PORT"]), BAD_FOR_SCHEDULER)
        send_from_stranger(ctx, server_port, BAD_FOR_SERVER)
    finally:
        ctx.term()
    (tmp_path / MARKER).write_text("sent")
    cluster.wait_ok()
    facts = [w.facts() for w in workers]
    assert {f["rank"] for f in facts} == {0, 1} and all(f["marker_seen"] for f in facts)
    assert facts[0]["rounds"] == facts[1]["rounds"] >= 2  # every round's sums checked exactly by the workers
    for proc, cases in ((scheduler, BAD_FOR_SCHEDULER), (server, BAD_FOR_SERVER)):
        log = proc.stderr()
        assert "Traceback" not in log, log
        for case, _ in cases:
            assert len(drop_lines(log, case)) == 1, (proc.name, case, log)
        assert f"dropped {len(cases)} messages in all" in log, log
    scheduler_log = scheduler.stderr()
    assert "dropped a message from 127.0.0.1" in scheduler_log
    assert "role must be 'server' or 'worker', got 'admin'" in scheduler_log
    assert "nested too deeply" in scheduler_log and "out of range" in scheduler_log
    assert "the sender is not a worker of this job" in server.stderr()
    for worker in workers:
        assert "Traceback" not in worker.stderr(), worker.stderr()


# -- a starting job -----------------------------------------------------------------------------

STARTING_GARBAGE = [  # (case, frames) as the ps_random, ps_notjson and ps_deep sent, and more
    ("random", [random.Random(30).randbytes(4096)]),
    ("notjson", [b"hello, scheduler\n"]),
    ("deep", [b"[" * 100_000]),
    ("empty", [b""]),
    ("ps-lite-length", [random.Random(31).randbytes(len(MXNET_ADD_NODE))]),  # the length of ps-lite's, not its form
    ("ps-lite-heartbeat", [add_node(cmd=5)]),  # ps-lite's form, but not its first message
    ("ps-lite-two-frames", [MXNET_ADD_NODE, MXNET_ADD_NODE]),
]
STARTING_REASONS = {"random": "not UTF-8 JSON", "notjson": "not UTF-8 JSON", "deep": "nested too deeply",
                    "empty": "not UTF-8 JSON", "ps-lite-length": "not UTF-8 JSON",
                    "ps-lite-heartbeat": "not UTF-8 JSON", "ps-lite-two-frames": "not UTF-8 JSON"}  # fmt: skip


def test_garbage_sent_to_a_starting_scheduler_is_dropped_and_logged_and_it_goes_on_registering_nodes(
    make_cluster: Callable[..., Cluster],
) -> None:
    """Before the ps-lite detection was made exact, each of these ended the starting job (exit 76, blaming
    ps-lite); now each is dropped with one line naming its sender, and the scheduler then registers the job's
    real server (the job's forming with its workers is test_ps's; no worker here: it would load torch)."""
    cluster = make_cluster(1, 1, PS_VERBOSE="1")
    scheduler = cluster.scheduler()
    ctx = zmq.Context()
    try:
        send_from_stranger(ctx, listening_port(scheduler.popen.pid), STARTING_GARBAGE)
    finally:
        ctx.term()
    server = cluster.server()
    deadline = time.monotonic() + 30
    while "registered server on 127.0.0.1 (1/1 servers, 0/1 workers)" not in scheduler.stderr():
        assert time.monotonic() < deadline, scheduler.stderr()
        assert scheduler.popen.poll() is None and server.popen.poll() is None, (scheduler.stderr(), server.stderr())
        time.sleep(0.1)
    log = scheduler.stderr()
    for case, _ in STARTING_GARBAGE:
        lines = drop_lines(log, case)
        assert len(lines) == 1 and ": malformed message: " in lines[0], (case, log)
        assert STARTING_REASONS[case] in lines[0] and "looks like ps-lite" not in lines[0], (case, lines[0])
    assert "aborting" not in log and "Traceback" not in log, log


def test_a_ps_lite_nodes_first_message_still_ends_a_starting_scheduler_naming_it(
    make_cluster: Callable[..., Cluster],
) -> None:
    """The frame a real MXNet worker sends first, from a socket without an identity (as ps-lite's): the job
    cannot work, so it ends at once (exit 76) with the message that names the peer and `clipflow launch --mxnet`."""
    cluster = make_cluster(1, 1)
    scheduler = cluster.scheduler()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.connect(f"tcp://127.0.0.1:{listening_port(scheduler.popen.pid)}")
        sock.send(MXNET_ADD_NODE)
        code = scheduler.popen.wait(timeout=30)
    finally:
        sock.close(linger=0)
        ctx.term()
    log = scheduler.stderr()
    assert code == CommError.exit_status == 76, log
    aborts = [line for line in log.splitlines() if line.startswith("clipflow ps: aborting: ")]
    assert len(aborts) == 1 and "Traceback" not in log, log
    assert re.fullmatch(
        r"clipflow ps: aborting: a peer at 127\.0\.0\.1:\d+ \(socket identity 0x00[0-9a-f]{8}\) does not speak "
        r"clipflow's parameter-server protocol: it looks like ps-lite \(MXNet's kvstore\), a ps-lite worker at "
        r"127\.0\.0\.1:9100 asking to join \(ADD_NODE\); an MXNet or other ps-lite script needs its own scheduler "
        r"and servers: run it with `clipflow launch --mxnet -n <workers> -s <servers> -- <command>`",
        aborts[0],
    ), aborts[0]


# -- the decoder --------------------------------------------------------------------------------


def _valid() -> list[list[bytes]]:
    messages = [
        Message("push", {"key": 3, "seq": 7, "rank": 1, "lr": 0.5}, [np.arange(6, dtype=np.float32).reshape(2, 3)]),
        Message("register", Registration("server", "127.0.0.1", 9000, 0, "abc").to_fields()),
        Message("welcome", {"rank": 0, "num_server": 1, "num_worker": 2, "servers": [[0, "127.0.0.1", 9000, ""]]}),
        Message("pull", {"key": 1, "seq": 2, "nested": {"a": [1, [2, [3]]]}}, [np.zeros(0, dtype=np.int64)]),
    ]
    return [[bytes(f) for f in encode(m)] for m in messages]


def _mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    frames = list(frames)
    i = rng.randrange(len(frames))
    data = bytearray(frames[i])
    choice = rng.randrange(8)
    if choice == 0 and data:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif choice == 1:  # cut
        data = data[: rng.randrange(len(data) + 1)]
    elif choice == 2:  # drop or add a frame
        return frames[:-1] if len(frames) > 1 and rng.random() < 0.5 else [*frames, bytes(rng.randrange(16))]
    elif choice == 3:  # a number made huge, infinite or odd
        text = data.decode("latin-1")
        digits = [k for k, c in enumerate(text) if c.isdigit()]
        if digits:
            k = rng.choice(digits)
            text = (
                text[:k]
                + rng.choice(["1e400", "-1e999", str(2**70), "NaN", "Infinity", "4611686018427387904"])
                + text[k + 1 :]
            )
        data = bytearray(text.encode("latin-1"))
    elif choice == 4:  # nesting
        depth = rng.choice([MAX_DEPTH, MAX_DEPTH + 1, 5000, 100_000])
        data = bytearray(b'{"op": "push", "x": ' + b"[" * depth + b"]" * depth + b"}")
    elif choice == 5:  # random bytes
        data = bytearray(rng.randbytes(rng.randrange(64)))
    elif choice == 6:  # an odd shape for the array
        text = data.decode("latin-1")
        shape = rng.choice(["[-1]", "[2, 3.5]", "[true]", '["2"]', f"[{2**62}, 4]", "[" + ", ".join(["1"] * 40) + "]"])
        data = bytearray(text.replace("[2, 3]", shape).replace("[0]", shape).encode("latin-1"))
    else:  # a lone surrogate, or invalid UTF-8
        data += rng.choice([b'"\\ud800"', b"\xff\xfe", b"\xc3"])
    frames[i] = bytes(data)
    return frames


def test_the_decoder_turns_any_bytes_into_a_message_or_a_wire_error() -> None:
    rng = random.Random(17)
    valid = _valid()
    outcomes = {"message": 0, "refused": 0}
    for _ in range(4000):
        frames = _mutate(rng, rng.choice(valid))
        if rng.random() < 0.2:
            frames = _mutate(rng, frames)
        try:
            msg = decode(frames)
        except WireError:
            outcomes["refused"] += 1
            continue
        outcomes["message"] += 1
        json.dumps(msg.fields)  # what came in can be logged and sent back
        for reader in (Registration.from_message, Welcome.from_message):
            try:
                reader(msg)
            except WireError:
                pass
    assert outcomes["message"] > 100 and outcomes["refused"] > 1000, outcomes
    for frames in valid:  # the valid ones still decode to what was sent
        assert encode(decode(frames))[0] == frames[0]


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([b'{"op": "push", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"], "nested too deeply"),
        ([b'{"op": "push", "arrays": [["float32", [4611686018427387904, 4]]]}', b"\0" * 8], "needs"),
        ([b'{"op": "push", "lr": 1e400}'], "number out of range"),
        ([b'{"op": "push", "seq": 1180591620717411303424}'], "integer out of range"),
        ([b'{"op": "push", "lr": NaN}'], "NaN"),
        ([b"\xff\xfe"], "not UTF-8 JSON"),
        ([b'{"op": "push", "arrays": [["float32", [2]]]}'], "announces 1 arrays but 0 array frames came"),
        ([b'{"op": "Push!"}'], "lower-case name"),
        ([], "empty message"),
    ],
)
def test_each_reported_bad_message_is_a_wire_error_naming_the_fault(frames: list[bytes], reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode(frames)


def test_a_registration_a_node_would_not_send_is_a_wire_error() -> None:
    for fields, reason in (
        ({"role": "admin", "host": "h"}, "role must be 'server' or 'worker'"),
        ({"role": "server", "host": "h"}, "a server must give the port"),
        ({"role": "worker", "host": "h", "rank": -1}, "rank must be an integer >= 0"),
        ({"role": "worker", "host": "a b"}, "host must be a string matching"),
        ({"role": "worker", "host": "h", "machine": "x" * 100}, "machine must be a string matching"),
    ):
        with pytest.raises(WireError, match=reason):
            Registration.from_message(Message("register", fields))


# -- security none beyond loopback ----------------------------------------------------------------


def test_security_none_beyond_loopback_needs_the_explicit_setting() -> None:
    remote = base_env(CLIPFLOW_PS_SECURITY="none", DMLC_PS_ROOT_URI="10.1.2.3", DMLC_NODE_HOST="10.1.2.4")
    with pytest.raises(ClipflowError) as info:
        PSConfig.from_env(remote)
    for name in ("CLIPFLOW_PS_SECURITY=none", "DMLC_PS_ROOT_URI=10.1.2.3", "CLIPFLOW_PS_INSECURE=1", "curve"):
        assert name in str(info.value)
    assert PSConfig.from_env({**remote, "CLIPFLOW_PS_INSECURE": "1"}).insecure
    server = base_env(DMLC_ROLE="server", CLIPFLOW_PS_SECURITY="none", DMLC_NODE_HOST="10.1.2.4")
    with pytest.raises(ClipflowError, match="this server's address DMLC_NODE_HOST=10.1.2.4"):
        PSConfig.from_env(server)  # the scheduler on loopback, the server listening beyond it
    assert not PSConfig.from_env(base_env(CLIPFLOW_PS_SECURITY="none")).insecure  # all on loopback: nothing to say
    with pytest.raises(ClipflowError, match="DMLC_NODE_HOST must be the host name or IP address"):
        PSConfig.from_env(base_env(DMLC_NODE_HOST="a host; rm -rf"))


def test_a_plan_with_security_none_beyond_loopback_is_refused_without_the_explicit_setting(tmp_path: Path) -> None:
    args = ("cluster", "plan", "--launcher", "ssh", "--hosts", "10.1.2.3,10.1.2.4", "--security", "none")
    refused = clipflow(*args, "--out", str(tmp_path / "plan.json"))
    assert_refused(
        refused, "cluster.security (--security) is none", "10.1.2.3, 10.1.2.4", "CLIPFLOW_PS_INSECURE=1", "curve"
    )
    assert not (tmp_path / "plan.json").exists()


def test_a_launch_with_security_none_beyond_loopback_is_refused_without_the_explicit_setting(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.2.3\n")
    args = ("-n", "1", "--launcher", "ssh", "-H", str(hosts), "--security", "none", "--", "true")
    refused = clipflow("launch", "--log-dir", str(tmp_path / "logs"), *args)
    assert_refused(refused, "--security", "10.1.2.3", "CLIPFLOW_PS_INSECURE=1")


def test_the_launcher_hands_the_explicit_setting_to_every_node(tmp_path: Path) -> None:
    """Accepted where the job starts (the plan's check), so every node of it gets CLIPFLOW_PS_INSECURE=1."""
    remote = make_plan("slurm", [Host("10.1.2.3")], 1, 1, 9100, 30, "none", tmp_path / "keys")
    assert all(c.env["CLIPFLOW_PS_INSECURE"] == "1" for c in role_commands(remote, ["python", "train.py"]))
    local = make_plan("local", [Host("localhost")], 1, 1, 9100, 30, "none", tmp_path / "keys")
    assert not any("CLIPFLOW_PS_INSECURE" in c.env for c in role_commands(local, ["python", "train.py"]))


def test_the_explicit_setting_allows_security_none_beyond_loopback_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIPFLOW_PS_INSECURE", "1")
    args = ("cluster", "plan", "--launcher", "ssh", "--hosts", "10.1.2.3,10.1.2.4", "--security", "none")
    done = clipflow(*args, "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("clipflow: warning: ")]
    assert len(warnings) == 1 and "CLIPFLOW_PS_INSECURE=1" in warnings[0] and "10.1.2.3" in warnings[0]
    assert json.loads((tmp_path / "plan.json").read_text())["security"] == "none"


def test_a_node_warns_when_it_runs_without_security_beyond_loopback(make_cluster: Callable[..., Cluster]) -> None:
    """A scheduler told it is reached at 0.0.0.0 (no loopback address: it listens on every interface)."""
    cluster = make_cluster(1, 1, DMLC_PS_ROOT_URI="0.0.0.0", CLIPFLOW_PS_SECURITY="none")
    env = {**cluster.env, "DMLC_ROLE": "scheduler"}
    refused = subprocess.run(ROLE_CLI, env=env, capture_output=True, text=True, timeout=60)
    assert_refused(refused, "CLIPFLOW_PS_SECURITY=none", "DMLC_PS_ROOT_URI=0.0.0.0", "CLIPFLOW_PS_INSECURE=1")
    allowed = cluster.start("scheduler", "scheduler", ROLE_CLI, CLIPFLOW_PS_INSECURE="1")
    deadline = time.monotonic() + 30
    while "warning: CLIPFLOW_PS_SECURITY=none beyond loopback" not in allowed.stderr():
        assert time.monotonic() < deadline, allowed.stderr()
        assert allowed.popen.poll() is None, allowed.stderr()
        time.sleep(0.1)
    assert "CLIPFLOW_PS_INSECURE=1" in allowed.stderr()
