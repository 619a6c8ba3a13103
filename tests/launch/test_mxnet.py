"""`clipflow launch --mxnet` with a real MXNet 1.9.1 ps-lite job (tests/launch/mxnet_kvstore_job.py, in the virtual
environment tests/reference_envs.py builds): 3 workers and 2 servers, every worker pulls the exact sum; a server killed
ends everything naming it; the same script without --mxnet is refused by clipflow's own scheduler naming the
ps-lite peer and the flag; and --mxnet's bad input. The MXNet tests skip, saying why, only where that environment
cannot be built (no network to PyPI)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import assert_refused, clipflow, free_port, python_env

JOB = Path(__file__).parent / "mxnet_kvstore_job.py"
TIMEOUT = 300


def launch_argv(mx_python: Path, tmp_path: Path, tag: str, *flags: str, rounds: int = 1) -> list[str]:
    return [sys.executable, "-m", "clipflow", "launch", "-n", "3", "-s", "2", "--launcher", "local",
            "--port", str(free_port()), "--log-dir", str(tmp_path / "logs"), "--grace", "5",
            "--env", f"JOB_TAG={tag}", *flags, "--", str(mx_python), str(JOB), "--rounds", str(rounds)]  # fmt: skip


def tagged(tag: str) -> dict[int, dict[str, str]]:
    """The processes (pid -> their DMLC_* variables) whose environment holds JOB_TAG=``tag``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
        except OSError:
            continue
        env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if item)
        if env.get(b"JOB_TAG") == tag.encode():
            found[int(entry.name)] = {k.decode(): v.decode() for k, v in env.items() if k.startswith(b"DMLC_")}
    return found


def assert_nothing_left(tag: str) -> None:
    deadline = time.monotonic() + 10
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tagged(tag), tagged(tag)


def test_an_mxnet_job_runs_under_clipflow_launch_and_every_worker_pulls_the_exact_sum(
    mx_python: Path, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    done = subprocess.run(launch_argv(mx_python, tmp_path, tag, "--mxnet", rounds=2), env=python_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    pulled = re.findall(r"^\[worker (\d) localhost\] mxnet worker (\d) of 3 round (\d) pulled \[([\d.]+)\] expected 6$",
                        done.stdout, re.M)  # fmt: skip
    assert sorted(pulled) == sorted((w, k, r, "6.0") for w, k in _pairs(pulled) for r in "01"), output
    assert {w for w, *_ in pulled} == {"0", "1", "2"} and {k for _, k, *_ in pulled} == {"0", "1", "2"}, output
    for rank in range(3):
        assert "pulled [6.0] expected 6" in (tmp_path / "logs" / f"worker-{rank}.log").read_text()
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.log")) == [
        "scheduler-0.log", "server-0.log", "server-1.log", "worker-0.log", "worker-1.log", "worker-2.log"
    ]  # fmt: skip
    assert_nothing_left(tag)


def _pairs(pulled: list[tuple[str, ...]]) -> set[tuple[str, str]]:
    return {(w, k) for w, k, *_ in pulled}


def test_killing_a_server_of_an_mxnet_job_ends_everything_naming_it(mx_python: Path, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    out = tmp_path / "launch.out"
    with out.open("w") as sink:
        launcher = subprocess.Popen(launch_argv(mx_python, tmp_path, tag, "--mxnet", rounds=100_000),
                                    env=python_env(), stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while "round 1 pulled" not in out.read_text():  # the job runs
            assert launcher.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        servers = {pid: env for pid, env in tagged(tag).items() if env.get("DMLC_ROLE") == "server"}
        assert len(servers) == 2, tagged(tag)
        pid = next(pid for pid, env in servers.items() if env["DMLC_RANK"] == "1")  # the second server
        os.kill(pid, signal.SIGKILL)
        code = launcher.wait(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    output = out.read_text()
    assert code != 0, output
    assert "clipflow launch: server 1 on localhost failed (killed by signal SIGKILL)" in output, output
    assert_nothing_left(tag)


def test_an_mxnet_job_without_the_flag_is_refused_naming_the_ps_lite_peer_and_the_flag(
    mx_python: Path, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    # clipflow's own scheduler used to wait out its 120 s start-up timeout here; 60 s is ample now
    done = subprocess.run(launch_argv(mx_python, tmp_path, tag), env=python_env(), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    lines = [line for line in output.splitlines() if "does not speak clipflow's parameter-server protocol" in line]
    assert lines, output
    line = lines[0]
    for part in ("a peer at 127.0.0.1:", "looks like ps-lite", "a ps-lite worker at 127.0.0.1:", "(ADD_NODE)",
                 "clipflow launch --mxnet"):  # fmt: skip
        assert part in line, (part, line)
    assert "clipflow launch: scheduler 0 on localhost failed" in output, output
    assert "Traceback" not in output, output
    assert_nothing_left(tag)


# -- bad input (no MXNet needed) ---------------------------------------------------------------


def test_mxnet_with_curve_security_is_refused(tmp_path: Path) -> None:
    done = clipflow("launch", "-n", "1", "--mxnet", "--security", "curve", "--log-dir", str(tmp_path / "logs"),
                    "--", sys.executable, "-c", "pass")  # fmt: skip
    assert_refused(done, "--mxnet with --security curve", "ps-lite", "cannot encrypt")
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").glob("*.log"))


def test_mxnet_beyond_loopback_needs_the_insecure_setting(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.250.0.7\n")
    args = ["launch", "-n", "1", "--mxnet", "-H", str(hosts), "--ssh-key", str(tmp_path / "key"),
            "--log-dir", str(tmp_path / "logs"), "--", "python", "job.py"]  # fmt: skip
    done = clipflow(*args)
    assert_refused(done, "--mxnet (ps-lite", "10.250.0.7", "CLIPFLOW_PS_INSECURE=1")


def test_the_shared_check_ends_a_starting_role_on_a_real_ps_lite_peer_and_only_drops_it_once_the_job_runs(
    mx_python: Path,
) -> None:
    """The one check the scheduler and the servers share (:meth:`Channel.reject_malformed`), on a ROUTER here
    that a real MXNet worker (DMLC_ROLE=worker) connects to as to its scheduler."""
    import zmq

    from clipflow.ps.log import Log
    from clipflow.ps.transport import INVALID_OP, Channel, ForeignPeer

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    env = {**python_env(), "DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
           "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1", "DMLC_NODE_HOST": "127.0.0.1"}  # fmt: skip
    worker = subprocess.Popen([str(mx_python), str(JOB)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        channel = Channel(sock, Log("test", 0), "router")
        got = channel.recv(120)
        assert got is not None, "the MXNet worker sent nothing"
        peer, msg = got
        assert msg.op == INVALID_OP and "ps-lite worker at 127.0.0.1:" in msg.get("foreign"), msg
        with pytest.raises(ForeignPeer) as info:
            channel.reject_malformed(peer, msg, starting=True)
        assert re.search(r"^a peer at 127\.0\.0\.1:\d+ .*looks like ps-lite.*clipflow launch --mxnet", str(info.value))
        channel.reject_malformed(peer, msg, starting=False)  # once the job runs: dropped and counted, no end
        assert channel.drops.count == 1
    finally:
        worker.kill()
        worker.wait()
        sock.close(linger=0)
        ctx.term()
