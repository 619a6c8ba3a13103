"""Malformed parameter-server messages and the job they are thrown at, for tests/ps/test_badinput.py.

As a module: BAD_FOR_SCHEDULER / BAD_FOR_SERVER (each case a socket identity and the frames a foreign process
sends), :func:`send_from_stranger` (a DEALER of no clipflow node's, connected over loopback),
:func:`listening_port` (the TCP port a process listens on, read from /proc) and :func:`drop_lines`.
As a program (``python tests/ps/ps_badinput_helpers.py``): a worker that pushpulls exactly checked sums
until the test's marker file appears, then prints one JSON line of facts (as tests/ps/ps_helpers.py does).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import zmq

MARKER = "bad-messages-sent"  # written in PYTEST_CLIPFLOW_DIR by the test once every bad message went out
HEADER_OK = json.dumps({"op": "push", "key": 0, "seq": 1, "arrays": [["float32", [2]]]}).encode()


def _header(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def _deep(depth: int) -> bytes:
    return b'{"op": "push", "x": ' + b"[" * depth + b"]" * depth + b"}"


# (case, frames): each sent once, from a socket whose identity names the case
COMMON = [
    ("deep", [_deep(200_000)]),
    ("huge-shape", [_header(op="push", key=0, seq=1, arrays=[["float32", [2**62, 4]]]), b"\0" * 8]),
    ("inf", [b'{"op": "push", "key": 0, "seq": 1, "lr": 1e400}']),
    ("big-int", [_header(op="push", key=0, seq=2**70)]),
    ("garbage", [bytes(range(256)) * 4]),
    ("truncated", [HEADER_OK]),  # announces an array frame that never comes
    ("short-array", [HEADER_OK, b"\0" * 5]),  # 5 bytes for 2 float32
    ("not-an-object", [b"[1, 2, 3]"]),
    ("unknown-op", [_header(op="frobnicate")]),
]
BAD_FOR_SCHEDULER = [
    *COMMON,
    # a register has to come from a node's control socket, <uid>/c
    ("role/c", [_header(op="register", role="admin", host="127.0.0.1", port=1234, rank=0)]),
    ("port/c", [_header(op="register", role="server", host="127.0.0.1", port=70000)]),
    ("host/c", [_header(op="register", role="worker", host="$(reboot)")]),
    ("fail/c", [_header(op="fail", reason="a stranger says the job failed")]),  # no member: not a failure
    ("done/c", [_header(op="done")]),
]
BAD_FOR_SERVER = [
    *COMMON,
    ("pushpull", [_header(op="pushpull", key=0, seq=9, rank=0, arrays=[["float32", [2]]]), b"\0" * 8]),
    ("pull", [_header(op="pull", key=0, seq=10, rank=0)]),
]


def identity(case: str) -> bytes:
    return f"stranger-{case}".encode()


def send_from_stranger(ctx: zmq.Context, port: int, cases: list[tuple[str, list[bytes]]]) -> None:
    """Each case's frames, from a DEALER of its own (identity ``stranger-<case>``) on 127.0.0.1:``port``; the
    sockets stay open a moment so that the receiver can still see where they came from."""
    socks = []
    for case, frames in cases:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity(case))
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send_multipart(frames)
        socks.append(sock)
    time.sleep(1.0)
    for sock in socks:
        sock.close()


def listening_port(pid: int, timeout: float = 30.0) -> int:
    """The TCP port process ``pid`` listens on (its only one), from /proc, once it listens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        ports = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        if len(ports) == 1:
            return ports.pop()
        time.sleep(0.1)
    raise AssertionError(f"process {pid} listens on no single TCP port")


def drop_lines(stderr: str, case: str) -> list[str]:
    """The lines of a node's log that drop case ``case``'s message, naming its sender (address and identity)."""
    sender = re.compile(
        r"dropped a[n]? [a-z_ ]*from 127\.0\.0\.1(:\d+)? \(socket identity "
        + re.escape(repr(identity(case).decode()))
        + r"\)"
    )
    return [line for line in stderr.splitlines() if sender.search(line)]


def main() -> None:
    """Worker: pushpull rounds (each sum checked exactly) until every worker saw the marker."""
    import torch

    from clipflow.ps import KVStore

    marker = Path(os.environ["PYTEST_CLIPFLOW_DIR"]) / MARKER
    kv = KVStore.create("dist_sync")
    kv.init([0, 1], [torch.zeros(2), torch.zeros(1)])
    rounds = 0
    deadline = time.monotonic() + 60
    while True:
        grad = torch.full((2,), float(kv.rank + 1)) * rounds
        stop = torch.tensor([1.0 if marker.exists() or time.monotonic() > deadline else 0.0])
        kv.pushpull([0, 1], [grad, stop], [grad, stop])  # the stop flags summed: every worker stops together
        want = torch.full((2,), float(sum(range(1, kv.num_workers + 1)))) * rounds
        if not torch.equal(grad, want):
            print(f"check failed: round {rounds}: {grad} != {want}", file=sys.stderr, flush=True)
            sys.exit(1)
        rounds += 1
        (marker.parent / f"training-{kv.rank}").touch()
        if stop.item() > 0:
            break
        time.sleep(0.05)
    kv.barrier()
    kv.close()
    print(json.dumps({"rank": kv.rank, "rounds": rounds, "marker_seen": marker.exists()}), flush=True)


if __name__ == "__main__":
    main()
