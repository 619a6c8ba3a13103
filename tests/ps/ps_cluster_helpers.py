"""The parameter-server tests' processes and messages: a Cluster of real scheduler, server and worker processes
on loopback (each Proc with its own stdout/stderr files; the make_cluster fixture in tests/ps/conftest.py makes them and
kills what is left), the DMLC_* environment of a worker (base_env), the worker programs' paths (ps_helpers.py,
ps_transport_helpers.py) and a message as a server receives it (_msg)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from helpers import free_port

from clipflow.ps.wire import Message, decode, encode

HERE = Path(__file__).resolve().parent  # tests/ps/: the worker programs lie beside this module
SRC = HERE.parents[1] / "src"
HELPERS = HERE / "ps_helpers.py"
ROLE_CMD = [sys.executable, "-c", "import sys; from clipflow.ps import run_role; sys.exit(run_role())"]
HB_TIMEOUT = 3.0
PROC_TIMEOUT = 60.0


def base_env(**extra: str) -> dict[str, str]:
    return {
        "DMLC_ROLE": "worker",
        "DMLC_PS_ROOT_URI": "127.0.0.1",
        "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "2",
        **extra,
    }


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def facts(self) -> dict:
        return json.loads(self.stdout().strip().splitlines()[-1])


class Cluster:
    """Starts roles as subprocesses with their own stdout/stderr files; kill_all() in a finally."""

    def __init__(self, tmp: Path, num_server: int, num_worker: int, **env: str) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PS_", "MXNET_", "CLIPFLOW_"))}
        self.env = {
            **clean,
            "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "DMLC_PS_ROOT_URI": "127.0.0.1",
            "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": str(num_server),
            "DMLC_NUM_WORKER": str(num_worker),
            "CLIPFLOW_HEARTBEAT_INTERVAL": "0.2",
            "CLIPFLOW_HEARTBEAT_TIMEOUT": str(HB_TIMEOUT),
            "CLIPFLOW_STARTUP_TIMEOUT": "40",
            "PYTEST_CLIPFLOW_DIR": str(tmp),
            **env,
        }

    def start(self, name: str, role: str, cmd: list[str], **env: str) -> Proc:
        out, err = self.tmp / f"{name}.out", self.tmp / f"{name}.err"
        with out.open("wb") as fout, err.open("wb") as ferr:
            popen = subprocess.Popen(cmd, env={**self.env, "DMLC_ROLE": role, **env}, stdout=fout, stderr=ferr)
        proc = Proc(name, popen, out, err)
        self.procs.append(proc)
        return proc

    def scheduler(self, **env: str) -> Proc:
        return self.start("scheduler", "scheduler", ROLE_CMD, **env)

    def server(self, name: str = "server", **env: str) -> Proc:
        return self.start(name, "server", ROLE_CMD, **env)

    def worker(self, name: str, scenario: str, **env: str) -> Proc:
        return self.start(name, "worker", [sys.executable, str(HELPERS), scenario], **env)

    def wait_exits(self, procs: list[Proc], timeout: float) -> dict[str, tuple[int | None, float]]:
        """Return code and exit time of each process (None where it is still running at the deadline)."""
        deadline = time.monotonic() + timeout
        exits: dict[str, tuple[int | None, float]] = {}
        while len(exits) < len(procs) and time.monotonic() < deadline:
            for p in procs:
                if p.name not in exits and p.popen.poll() is not None:
                    exits[p.name] = (p.popen.returncode, time.monotonic())
            time.sleep(0.05)
        for p in procs:
            exits.setdefault(p.name, (None, time.monotonic()))
        return exits

    def wait_ok(self, timeout: float = PROC_TIMEOUT) -> None:
        exits = self.wait_exits(self.procs, timeout)
        for p in self.procs:
            assert exits[p.name][0] == 0, f"{p.name} exited {exits[p.name][0]}:\n{p.stderr()}"

    def kill_all(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
            p.popen.wait(timeout=10)


TRANSPORT_HELPERS = HERE / "ps_transport_helpers.py"


def rounds(cluster: Cluster, name: str, **env: str) -> Proc:
    """A worker running tests/ps/ps_transport_helpers.py's ``rounds`` scenario."""
    return cluster.start(name, "worker", [sys.executable, str(TRANSPORT_HELPERS), "rounds"], **env)


def _msg(op: str, key: int, rank: int, arrays: list[np.ndarray], seq: int, **fields: object) -> Message:
    # through the codec, like the server receives it (read-only arrays)
    return decode([bytes(f) for f in encode(Message(op, {"key": key, "seq": seq, "rank": rank, **fields}, arrays))])
