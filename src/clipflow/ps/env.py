"""Parameter-server settings, read from the environment variables MXNet/ps-lite users know."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from clipflow.errors import ClipflowError

ROLES = ("scheduler", "server", "worker")
DEFAULT_BIGARRAY_BOUND = 1_000_000
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class PSConfig:
    """Everything a scheduler, server or worker needs to find the others."""

    role: str
    root_uri: str
    root_port: int
    num_server: int
    num_worker: int
    node_host: str
    interface: str | None = None
    verbose: int = 0
    bigarray_bound: int = DEFAULT_BIGARRAY_BOUND
    rank: int | None = None
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 30.0
    startup_timeout: float = 120.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PSConfig:
        """Read the DMLC_*/PS_*/MXNET_*/CLIPFLOW_* variables; raise ClipflowError naming a bad one."""
        env = os.environ if environ is None else environ
        role = _required(env, "DMLC_ROLE", "one of scheduler, server, worker").lower()
        if role not in ROLES:
            raise ClipflowError(f"DMLC_ROLE must be one of scheduler, server, worker; got {role!r}")
        root_uri = _required(env, "DMLC_PS_ROOT_URI", "the scheduler's host name or IP address")
        root_port = _int(env, "DMLC_PS_ROOT_PORT", "the scheduler's port, an integer 1-65535", low=1, high=65535)
        num_server = _int(env, "DMLC_NUM_SERVER", "the number of server processes, an integer >= 1", low=1)
        num_worker = _int(env, "DMLC_NUM_WORKER", "the number of worker processes, an integer >= 1", low=1)
        verbose = _int(env, "PS_VERBOSE", "0, 1 (log connections) or 2 (log every message)", low=0, high=2, default=0)
        bound = _int(
            env,
            "MXNET_KVSTORE_BIGARRAY_BOUND",
            "the element count above which an array is split over all servers, an integer >= 1",
            low=1,
            default=DEFAULT_BIGARRAY_BOUND,
        )
        rank = _rank(env, role, num_server, num_worker)
        interval = _float(env, "CLIPFLOW_HEARTBEAT_INTERVAL", "seconds between heartbeats, a number > 0", 1.0)
        timeout = _float(
            env, "CLIPFLOW_HEARTBEAT_TIMEOUT", "seconds of silence before a node is dead, a number > 0", 30.0
        )
        if timeout <= interval:
            raise ClipflowError(
                f"CLIPFLOW_HEARTBEAT_TIMEOUT ({timeout:g} s) must be larger than "
                f"CLIPFLOW_HEARTBEAT_INTERVAL ({interval:g} s)"
            )
        startup = _float(
            env, "CLIPFLOW_STARTUP_TIMEOUT", "seconds to wait for all nodes to register, a number > 0", 120.0
        )
        node_host = _optional(env, "DMLC_NODE_HOST") or default_node_host(root_uri)
        return cls(
            role=role,
            root_uri=root_uri,
            root_port=root_port,
            num_server=num_server,
            num_worker=num_worker,
            node_host=node_host,
            interface=_optional(env, "DMLC_INTERFACE"),
            verbose=verbose,
            bigarray_bound=bound,
            rank=rank,
            heartbeat_interval=interval,
            heartbeat_timeout=timeout,
            startup_timeout=startup,
        )


def default_node_host(root_uri: str) -> str:
    """The address a node advertises when DMLC_NODE_HOST is unset."""
    if is_loopback(root_uri):
        return root_uri
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as exc:
        raise ClipflowError(
            f"cannot resolve this machine's host name ({exc}); set DMLC_NODE_HOST to the IP address "
            "the other nodes should use to reach this one"
        ) from exc


def is_loopback(host: str) -> bool:
    """True for localhost names and 127.0.0.0/8 or ::1 addresses."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _optional(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _required(env: Mapping[str, str], name: str, what: str) -> str:
    value = _optional(env, name)
    if value is None:
        raise ClipflowError(f"{name} is not set: it must be {what}")
    return value


def _int(
    env: Mapping[str, str],
    name: str,
    what: str,
    low: int | None = None,
    high: int | None = None,
    default: int | None = None,
) -> int:
    raw = _optional(env, name)
    if raw is None:
        if default is None:
            raise ClipflowError(f"{name} is not set: it must be {what}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ClipflowError(f"{name} must be {what}; got {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ClipflowError(f"{name} must be {what}; got {raw!r}")
    return value


def _float(env: Mapping[str, str], name: str, what: str, default: float) -> float:
    raw = _optional(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ClipflowError(f"{name} must be {what}; got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ClipflowError(f"{name} must be {what}; got {raw!r}")
    return value


def _rank(env: Mapping[str, str], role: str, num_server: int, num_worker: int) -> int | None:
    if role == "scheduler":
        return None
    count, count_var = (num_worker, "DMLC_NUM_WORKER") if role == "worker" else (num_server, "DMLC_NUM_SERVER")
    what = f"this {role}'s rank, an integer 0..{count - 1} ({count_var}={count})"
    raw = _optional(env, "DMLC_RANK")
    if raw is None:
        return None
    return _int(env, "DMLC_RANK", what, low=0, high=count - 1)
