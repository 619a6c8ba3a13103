"""Parameter-server settings, read from the environment variables MXNet/ps-lite users know (DMLC_*, PS_*,
MXNET_*) and from clipflow's own (CLIPFLOW_*, read by :mod:`clipflow.environment`), which mean:

Security (see :mod:`clipflow.ps.security`)
    ``CLIPFLOW_PS_SECURITY`` = ``curve`` | ``none`` | ``auto`` (default ``auto``: ``curve``
    whenever DMLC_PS_ROOT_URI is not a loopback address, ``none`` on loopback).
    ``none`` while the scheduler, or this server, is not on a loopback address needs
    ``CLIPFLOW_PS_INSECURE=1`` as well (:attr:`PSConfig.insecure`; every node then warns).
    ``CLIPFLOW_PS_KEYS`` = the key folder made by ``python -m clipflow ps keys DIR``
    (:func:`clipflow.ps.security.make_keys`); needed, and copied to every node, with ``curve``.

Reliability (see :mod:`clipflow.ps.reliable`)
    ``PS_RESEND`` = 1 resends a request not answered within ``PS_RESEND_TIMEOUT``
    milliseconds (default 1000); receivers drop duplicates. With ``PS_RESEND=0`` (the
    default) a request unanswered for that long is probed, and a lost one is reported
    as an error instead of waiting forever.
    ``CLIPFLOW_PS_DROP_PERCENT`` (fault injection, default 0) drops that percentage of
    the data-plane messages (worker <-> server) each node receives; heartbeats and other
    scheduler traffic are never dropped. ``CLIPFLOW_PS_DROP_SEED`` seeds it.

Throughput (see :mod:`clipflow.ps.transport`)
    ``CLIPFLOW_PS_MALLOC_TUNE`` = 1 (default) | 0: let servers and workers keep large
    freed buffers on the glibc heap (avoids page faults on every received 100 MB message).
    ``CLIPFLOW_PS_SHM`` = 1 (default) | 0: a worker and a server on the same machine pass
    arrays through shared memory instead of loopback TCP (see :mod:`clipflow.ps.shm`);
    ``CLIPFLOW_PS_SHM_MIN_BYTES`` (default 65536): smaller key parts keep using TCP.
    ``CLIPFLOW_PS_PIECE`` (default 8,000,000 elements, 32 MB; 0: off): a key split over the servers
    (over MXNET_KVSTORE_BIGARRAY_BOUND) travels in pieces of at most that many elements, each
    summed and sent back by its server as soon as every worker's copy of it is in.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from clipflow.environment import (
    ClipflowEnv,
    float_var,
    int_var,
    optional_var,
    read_env,
    required_var,
)
from clipflow.errors import ClipflowError
from clipflow.ps.security import insecure_refusal

ROLES = ("scheduler", "server", "worker")
HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]{1,255}")  # a host name, an IPv4 or IPv6 address (with a zone)
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
    # the CLIPFLOW_* settings' defaults are clipflow.environment's
    heartbeat_interval: float = ClipflowEnv.heartbeat_interval
    heartbeat_timeout: float = ClipflowEnv.heartbeat_timeout
    startup_timeout: float = ClipflowEnv.startup_timeout
    security: str = "none"
    keys_dir: str | None = None
    insecure: bool = False  # security none beyond loopback, allowed by CLIPFLOW_PS_INSECURE=1: nodes warn
    resend: bool = False
    resend_timeout: float = 1.0
    drop_percent: float = ClipflowEnv.ps_drop_percent
    drop_seed: int | None = None
    malloc_tune: bool = ClipflowEnv.ps_malloc_tune
    shm: bool = ClipflowEnv.ps_shm
    shm_min_bytes: int = ClipflowEnv.ps_shm_min_bytes
    piece: int = ClipflowEnv.ps_piece

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PSConfig:
        """Read the DMLC_*/PS_*/MXNET_*/CLIPFLOW_* variables; raise ClipflowError naming a bad one."""
        env = os.environ if environ is None else environ
        role = required_var(env, "DMLC_ROLE", "one of scheduler, server, worker").lower()
        if role not in ROLES:
            raise ClipflowError(f"DMLC_ROLE must be one of scheduler, server, worker; got {role!r}")
        root_uri = required_var(env, "DMLC_PS_ROOT_URI", "the scheduler's host name or IP address")
        root_port = int_var(env, "DMLC_PS_ROOT_PORT", "the scheduler's port, an integer 1-65535", low=1, high=65535)
        num_server = int_var(env, "DMLC_NUM_SERVER", "the number of server processes, an integer >= 1", low=1)
        num_worker = int_var(env, "DMLC_NUM_WORKER", "the number of worker processes, an integer >= 1", low=1)
        verbose = int_var(env, "PS_VERBOSE", "0, 1 (log connections) or 2 (log every message)", 0, 2, default=0)
        bound = int_var(
            env,
            "MXNET_KVSTORE_BIGARRAY_BOUND",
            "the element count above which an array is split over all servers, an integer >= 1",
            low=1,
            default=DEFAULT_BIGARRAY_BOUND,
        )
        rank = _rank(env, role, num_server, num_worker)
        clipflow = read_env(env)
        node_host = optional_var(env, "DMLC_NODE_HOST") or default_node_host(root_uri)
        if not HOST.fullmatch(node_host):
            raise ClipflowError(
                f"DMLC_NODE_HOST must be the host name or IP address other nodes reach this one at; got {node_host!r}"
            )
        security, keys_dir = _security(clipflow, root_uri)
        exposed = _exposed(security, role, root_uri, node_host)
        if exposed and not clipflow.ps_insecure:
            fix = "Use CLIPFLOW_PS_SECURITY=curve (or auto) with the job's key folder in CLIPFLOW_PS_KEYS"
            raise ClipflowError(insecure_refusal("CLIPFLOW_PS_SECURITY=none", exposed, fix))
        resend = int_var(env, "PS_RESEND", "0 (off) or 1 (resend unanswered requests)", low=0, high=1, default=0)
        resend_ms = float_var(
            env, "PS_RESEND_TIMEOUT", "milliseconds before an unanswered request is resent, a number > 0", 1000.0
        )
        return cls(
            role=role,
            root_uri=root_uri,
            root_port=root_port,
            num_server=num_server,
            num_worker=num_worker,
            node_host=node_host,
            interface=optional_var(env, "DMLC_INTERFACE"),
            verbose=verbose,
            bigarray_bound=bound,
            rank=rank,
            heartbeat_interval=clipflow.heartbeat_interval,
            heartbeat_timeout=clipflow.heartbeat_timeout,
            startup_timeout=clipflow.startup_timeout,
            security=security,
            keys_dir=keys_dir,
            insecure=bool(exposed),
            resend=bool(resend),
            resend_timeout=resend_ms / 1000.0,
            drop_percent=clipflow.ps_drop_percent,
            drop_seed=clipflow.ps_drop_seed,
            malloc_tune=clipflow.ps_malloc_tune,
            shm=clipflow.ps_shm,
            shm_min_bytes=clipflow.ps_shm_min_bytes,
            piece=clipflow.ps_piece,
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


def _rank(env: Mapping[str, str], role: str, num_server: int, num_worker: int) -> int | None:
    if role == "scheduler":
        return None
    count, count_var = (num_worker, "DMLC_NUM_WORKER") if role == "worker" else (num_server, "DMLC_NUM_SERVER")
    what = f"this {role}'s rank, an integer 0..{count - 1} ({count_var}={count})"
    raw = optional_var(env, "DMLC_RANK")
    if raw is None:
        return None
    return int_var(env, "DMLC_RANK", what, low=0, high=count - 1)


def _exposed(security: str, role: str, root_uri: str, node_host: str) -> str | None:
    """Without security, the address beyond loopback this node would talk over (the scheduler's, or a server's
    own, which it listens on), named for a message; None when all its traffic stays on loopback."""
    if security != "none":
        return None
    if not is_loopback(root_uri):
        return f"the scheduler's address DMLC_PS_ROOT_URI={root_uri}"
    if role == "server" and not is_loopback(node_host):
        return f"this server's address DMLC_NODE_HOST={node_host}"
    return None


def _security(clipflow: ClipflowEnv, root_uri: str) -> tuple[str, str | None]:
    """(``curve`` or ``none``, the key folder) from CLIPFLOW_PS_SECURITY and CLIPFLOW_PS_KEYS."""
    mode = clipflow.ps_security
    if mode == "auto":
        mode = "none" if is_loopback(root_uri) else "curve"
    if mode == "none":
        return mode, None
    why = (
        "CLIPFLOW_PS_SECURITY=curve"
        if clipflow.ps_security == "curve"
        else f"DMLC_PS_ROOT_URI={root_uri} is not a loopback address, so CLIPFLOW_PS_SECURITY=auto means curve"
    )
    if clipflow.ps_keys is None:
        raise ClipflowError(
            f"{why}, but CLIPFLOW_PS_KEYS is not set: make a key folder with `python -m clipflow ps keys DIR`, "
            "copy it to every node and set CLIPFLOW_PS_KEYS=DIR (or CLIPFLOW_PS_SECURITY=none on a trusted network)"
        )
    from clipflow.ps.security import check_keys

    check_keys(str(clipflow.ps_keys))
    return mode, str(clipflow.ps_keys)
