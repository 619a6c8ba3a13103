"""The link check's probe, run on the hosts over ssh (:mod:`clipflow.cluster.links`): a ZeroMQ TCP server and a
client that measures one link to it, over the same DEALER to ROUTER sockets the parameter server uses.

``serve``: binds a ROUTER on a free port of every address, prints the port (as :data:`REPLY` JSON) and answers
until its stdin closes (the launching node's ssh session ends) or ``seconds`` pass. Each request is two frames,
a kind and a body: ``ping`` is answered with an empty frame, ``up`` (a chunk the client sent) with an empty frame,
``down`` with a chunk of the size the body names.

``measure`` (the request as JSON on stdin: address, port, seconds, pings, chunk): a few pings (the round trip of
an empty message; the least is kept), then, for ``seconds`` each, chunks sent to the server (up) and chunks
asked of it (down), a few in flight at a time, every one answered. A direction's rate is the bytes answered over
the time until the last answer; once ``seconds`` have passed no new chunk is sent, and whatever is still in flight
after twice that is left out, so a very slow link is measured on what did arrive and the probe still ends.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import zmq

REPLY = "CLIPFLOW_REPLY "  # as clipflow.hosts.remote_python reads answers
IN_FLIGHT = 4  # chunks on the way at once: enough to keep a fast link busy, little to drain from a slow one


def serve(seconds: float) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    port = sock.bind_to_random_port("tcp://*")
    print(REPLY + json.dumps({"port": port}), flush=True)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    chunks: dict[int, bytes] = {}
    deadline = time.monotonic() + seconds
    while not closed.is_set() and time.monotonic() < deadline:
        if not sock.poll(100):
            continue
        peer, kind, body = sock.recv_multipart(copy=True)
        if kind == b"down":
            size = int(body)
            reply = chunks.setdefault(size, bytes(size))
        else:
            reply = b""
        sock.send_multipart([peer, kind, reply], copy=False)
    sock.close()
    ctx.term()


def _rate(sock: zmq.Socket, kind: bytes, body: bytes, size: int, seconds: float) -> float:
    """Bytes per second of one direction: chunks of ``size`` (sent, or asked for) answered within the bounds."""
    start = time.monotonic()
    stop_sending, give_up = start + seconds, start + 2 * seconds
    sent = answered = 0
    last = start
    while True:
        now = time.monotonic()
        while sent - answered < IN_FLIGHT and now < stop_sending:
            sock.send_multipart([kind, body], copy=False)
            sent += 1
        if answered == sent or now >= give_up:
            break
        if sock.poll(max(1, int((give_up - now) * 1000))):
            sock.recv_multipart()
            answered += 1
            last = time.monotonic()
    return answered * size / (last - start) if answered else 0.0


def measure(request: dict) -> dict:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"tcp://{request['address']}:{request['port']}")
    try:
        rtts = []
        for _ in range(request["pings"] + 1):  # the first one also opens the connection: not counted
            began = time.monotonic()
            sock.send_multipart([b"ping", b""])
            if not sock.poll(int(request["seconds"] * 4000) + 2000):
                raise SystemExit(f"no answer from {request['address']}:{request['port']} (a firewall?)")
            sock.recv_multipart()
            rtts.append(time.monotonic() - began)
        size = request["chunk"]
        up = _rate(sock, b"up", bytes(size), size, request["seconds"])
        down = _rate(sock, b"down", str(size).encode(), size, request["seconds"])
    finally:
        sock.close()
        ctx.term()
    return {
        "latency_ms": min(rtts[1:]) * 1e3 / 2,  # the link's own delay: a busy host only ever adds to a round trip
        "up_gbit_s": up * 8 / 1e9,
        "down_gbit_s": down * 8 / 1e9,
    }


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve(float(sys.argv[2]))
    else:
        print(REPLY + json.dumps(measure(json.load(sys.stdin))), flush=True)


if __name__ == "__main__":
    main()
