"""A server's or worker's heartbeat thread: proves this node alive, watches the scheduler.

The thread owns its own DEALER socket (zmq sockets are not thread-safe). It
sends a heartbeat every interval; the scheduler answers each. If the scheduler
sends ABORT, or has not answered for the heartbeat timeout (the startup timeout
before its first answer, so nodes may start before the scheduler), the thread
calls ``on_abort(reason)``, which by default prints one line and ends the whole
process with ``os._exit(ABORTED)``: a main thread stuck in compute or in a wait cannot
keep a broken job alive.

The thread also watches its socket's handshakes (a zmq socket monitor): before
the scheduler's first answer, a CURVE handshake the scheduler refused (a client
key it does not accept) or :data:`HANDSHAKE_TRIES` connections dropped during the
handshake (a different server key, or one side without CURVE) end the process
with a message naming CLIPFLOW_PS_KEYS / CLIPFLOW_PS_SECURITY, instead of waiting
out the startup timeout.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from clipflow.errors import ABORTED
from clipflow.ps.env import PSConfig
from clipflow.ps.log import Log, print_abort
from clipflow.ps.security import Keys
from clipflow.ps.transport import INVALID_OP, Channel, connect, make_socket
from clipflow.ps.wire import Message, Op

POLL_S = 0.05
HANDSHAKE_TRIES = 3
_WATCHED = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
_WATCHED |= zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


def exit_process(reason: str) -> None:
    """Default abort action: print the reason and end the process at once."""
    print_abort(reason)
    os._exit(ABORTED)


class Heartbeat(threading.Thread):
    """Daemon thread; :attr:`aborted` is set (and ``on_abort`` called) when the job must end."""

    def __init__(
        self,
        ctx: zmq.Context,
        cfg: PSConfig,
        uid: str,
        identity: bytes,
        log: Log,
        on_abort: Callable[[str], None] = exit_process,
        keys: Keys | None = None,
    ) -> None:
        super().__init__(name="clipflow-ps-heartbeat", daemon=True)
        self.keys = keys
        self.ctx = ctx
        self.cfg = cfg
        self.uid = uid
        self.identity = identity
        self.log = log
        self.on_abort = on_abort
        self.aborted = threading.Event()
        self.answered = threading.Event()  # set on the scheduler's first answer: it can route ABORT to us
        self.reason = ""
        self._halt = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating (after DONE, or on shutdown) and wait for the thread to close its socket."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # any failure here must end the job, not hang it
            self._abort(f"heartbeat thread failed: {type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        cfg = self.cfg
        sock = make_socket(self.ctx, zmq.DEALER, self.identity, self.keys)
        channel = Channel(sock, self.log, "heartbeat")
        monitor = sock.get_monitor_socket(_WATCHED, addr=f"inproc://clipflow-hb-monitor-{id(self)}")
        try:
            connect(sock, cfg.root_uri, cfg.root_port)
            started = time.monotonic()
            last_answer: float | None = None
            next_beat = started
            while not self._halt.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    channel.try_send(Message(Op.HEARTBEAT, {"uid": self.uid}))
                    next_beat = now + cfg.heartbeat_interval
                got = channel.recv(min(POLL_S, max(0.0, next_beat - now)))
                if last_answer is None and self._handshake_failed(monitor):
                    return
                now = time.monotonic()
                if got is not None:
                    msg = got[1]
                    if msg.op == Op.HEARTBEAT_ACK:
                        last_answer = now
                        self.answered.set()
                    elif msg.op == Op.ABORT:
                        self._abort(str(msg.get("reason", "the scheduler aborted the job")))
                        return
                    elif msg.op == INVALID_OP:
                        self.log.error(f"dropped a message from the scheduler: {msg.get('reason')}")
                limit = cfg.heartbeat_timeout if last_answer is not None else cfg.startup_timeout
                since = last_answer if last_answer is not None else started
                if now - since > limit and not self._halt.is_set():
                    if last_answer is None:
                        self._abort(
                            f"no answer from the scheduler at {cfg.root_uri}:{cfg.root_port} within "
                            f"{limit:g} s (CLIPFLOW_STARTUP_TIMEOUT): it is not running there, or it does not "
                            f"accept this node's security settings ({self._security()}); every node needs the "
                            "same CLIPFLOW_PS_SECURITY and key folder (CLIPFLOW_PS_KEYS)"
                        )
                        return
                    self._abort(
                        f"scheduler at {cfg.root_uri}:{cfg.root_port} stopped answering "
                        f"(no heartbeat reply for {now - since:.1f} s)"
                    )
                    return
        finally:
            sock.disable_monitor()
            monitor.close(linger=0)
            channel.close()

    _dropped_handshakes = 0

    def _security(self) -> str:
        text = f"CLIPFLOW_PS_SECURITY={'curve' if self.keys else 'none'}"
        return text + (f", CLIPFLOW_PS_KEYS={self.keys.folder}" if self.keys is not None else "")

    def _handshake_failed(self, monitor: zmq.Socket) -> bool:
        """Abort (and return True) when handshakes with the scheduler keep failing."""
        cfg = self.cfg
        where = f"scheduler at {cfg.root_uri}:{cfg.root_port}"
        security = self._security()
        while monitor.poll(0):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._dropped_handshakes = -(1 << 30)
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self._abort(
                    f"the {where} refused this node's CURVE key ({security}): every node needs the job's "
                    "key folder (`python -m clipflow ps keys DIR` makes one)"
                )
                return True
            elif event in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_DISCONNECTED):
                self._dropped_handshakes += 1
                if self._dropped_handshakes >= HANDSHAKE_TRIES:
                    self._abort(
                        f"the {where} accepted the connection but the security handshake failed "
                        f"{self._dropped_handshakes} times ({security}): the scheduler uses a different server "
                        "key or security setting; every node needs the same CLIPFLOW_PS_SECURITY and key folder "
                        "(CLIPFLOW_PS_KEYS)"
                    )
                    return True
        return False

    def _abort(self, reason: str) -> None:
        self.reason = reason
        self.aborted.set()
        self.on_abort(reason)
