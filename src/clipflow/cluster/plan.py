"""The cluster plan: which role runs on which host, and on which port the scheduler listens.

Placement: the scheduler on the first host, one worker per host in turn, servers
beside the workers in turn. The plan is a JSON file that the launcher reads.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clipflow.cluster.ports import port_free
from clipflow.errors import ClipflowError
from clipflow.ps.env import is_loopback
from clipflow.ps.security import make_keys

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class Role:
    role: str  # scheduler | server | worker
    rank: int
    host: str


@dataclass
class Plan:
    launcher: str
    hosts: list[str]
    root_uri: str
    root_port: int
    num_workers: int
    num_servers: int
    heartbeat_timeout: float
    roles: list[Role] = field(default_factory=list)
    security: str = "none"  # curve or none, for every parameter-server socket
    keys_dir: str = ""  # the CURVE key folder (made by the cluster stage) when security is curve

    def write(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> Plan:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            data["roles"] = [Role(**r) for r in data["roles"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ClipflowError(f"cluster plan {path} cannot be read ({exc}); rerun the cluster stage") from None


def make_plan(
    launcher: str,
    hosts: list[str],
    num_workers: int,
    num_servers: int,
    root_port: int,
    heartbeat_timeout: float,
    security: str = "auto",
    keys_dir: str | Path = "",
) -> Plan:
    """With security `auto`, CURVE whenever the scheduler is not on loopback; with CURVE the job's
    keys are made in keys_dir (kept when already there)."""
    if not hosts:
        raise ClipflowError("cluster.hosts is empty: name at least one host")
    if launcher == "local" and any(h not in LOCAL_NAMES for h in hosts):
        raise ClipflowError(
            f"the local launcher runs every role on this machine, but cluster.hosts names {hosts}; "
            "use hosts: [localhost]"
        )
    roles = [Role("scheduler", 0, hosts[0])]
    roles += [Role("server", r, hosts[r % len(hosts)]) for r in range(num_servers)]
    roles += [Role("worker", r, hosts[r % len(hosts)]) for r in range(num_workers)]
    root_uri = "127.0.0.1" if hosts[0] in LOCAL_NAMES else socket.gethostbyname(hosts[0])
    if security not in ("auto", "curve", "none"):
        raise ClipflowError(f"cluster.security must be auto, curve or none, not {security!r}")
    if security == "auto":
        security = "none" if is_loopback(root_uri) else "curve"
    if security == "curve" and not keys_dir:
        raise ClipflowError("CURVE security needs a folder for the job's keys")
    keys = str(make_keys(keys_dir)) if security == "curve" else ""
    return Plan(
        launcher,
        hosts,
        root_uri,
        root_port,
        num_workers,
        num_servers,
        heartbeat_timeout,
        roles,
        security,
        keys,
    )


def check_ports(plan: Plan) -> None:
    """The scheduler's port must be free where it will listen (local hosts only, for now)."""
    if plan.roles[0].host in LOCAL_NAMES and not port_free(plan.root_port):
        raise ClipflowError(
            f"port {plan.root_port} on {plan.roles[0].host} is in use (another clipflow run?); "
            "stop that process or set cluster.root_port to a free port"
        )
