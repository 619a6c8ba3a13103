"""The cluster plan: which role runs on which host, and on which port the scheduler listens.

Placement ``beside`` (the default): the scheduler on the first host, workers over the
hosts in turn (a host with ``slots=N`` takes N turns), servers over the hosts in turn,
so each host runs a server beside its worker. ``cycle`` is MXNet launch.py's: servers
first, then workers, each on the next host in a cycle. The plan is a JSON file that
the launcher reads; hosts are written as ``[user@]host[:port]``.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from clipflow.environment import SECURITY_MODES, read_env
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.hosts.hostsfile import Host, hosts_from_config, parse_host, read_hosts_file
from clipflow.hosts.ports import port_free
from clipflow.hosts.ssh import SshSettings
from clipflow.ps.env import is_loopback
from clipflow.ps.security import insecure_refusal, make_keys
from clipflow.schemas import config_setting
from clipflow.textfile import read_json_object
from clipflow.values import is_int, is_number

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
LAUNCHERS = ("local", "ssh", "slurm")
PLACEMENTS = ("beside", "cycle")


@dataclass(frozen=True)
class Role:
    role: str  # scheduler | server | worker
    rank: int
    host: str  # [user@]host[:port]
    address: str = "127.0.0.1"  # the IP address the role advertises to the others (DMLC_NODE_HOST)


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
    placement: str = "beside"
    ssh_key: str = ""  # ssh launcher: the job's key, the pinned host keys, the remote Python and working dir
    known_hosts: str = ""
    python: str = ""
    workdir: str = ""

    def host_list(self) -> list[Host]:
        """The hosts, parsed."""
        return [parse_host(text, "the cluster plan's hosts") for text in self.hosts]

    def ssh_settings(self) -> SshSettings:
        """The job's key and the pinned host keys, for the ssh launcher's stages; ClipflowError for another
        launcher's plan, which has none (its roles are not reached over ssh)."""
        if self.launcher != "ssh":
            raise ClipflowError(
                f"the cluster plan's launcher is {self.launcher}, whose roles are not reached over ssh: this command "
                "works on an ssh plan's hosts (clipflow cluster plan --launcher ssh, or cluster.launcher: ssh)"
            )
        return SshSettings(Path(self.ssh_key), Path(self.known_hosts))

    def summary(self) -> list[str]:
        """Where each role runs and how the parameter server is reached, a line each."""
        lines = [f"{r.role:9} {r.rank:3} on {r.host} ({r.address})" for r in self.roles]
        lines.append(f"scheduler at {self.root_uri}:{self.root_port}")
        keys = f" (keys in {self.keys_dir})" if self.keys_dir else ""
        return [*lines, f"parameter-server security: {self.security}{keys}"]

    def role_hosts(self) -> list[str]:
        """The hosts that run a role, in the plan's order (as its roles name them)."""
        return list(dict.fromkeys(r.host for r in self.roles))

    def rank0_host(self) -> str:
        """The host of worker 0 (rank 0 writes the run's files); ClipflowError when the plan places none."""
        host = next((r.host for r in self.roles if r.role == "worker" and r.rank == 0), None)
        if host is None:
            raise ClipflowError(
                f"the cluster plan places no worker 0 (hosts {', '.join(self.hosts)}); rerun the cluster stage"
            )
        return host

    def worker_ranks(self, host: str) -> list[int]:
        """The ranks of the workers on ``host`` (as the plan's roles name it)."""
        return [r.rank for r in self.roles if r.role == "worker" and r.host == host]

    def runs_scheduler(self, host: Host) -> bool:
        return self.roles[0].host == str(replace(host, slots=1))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        """The plan of :meth:`to_dict`'s form (checked by the caller: plan.json's reader, or a job's schema; and
        then :meth:`check`)."""
        return cls(**{**data, "roles": [Role(**r) for r in data["roles"]]})

    def check(self) -> None:
        """The roles agree with the rest of the plan, as in every plan :func:`make_plan` makes (a hand-edited
        job.json may not, and its job would wait for a role that never starts): the scheduler once, as the first
        role, rank 0, at ``root_uri``; the workers ranks 0..num_workers-1 and the servers 0..num_servers-1, each
        once; every role on one of ``hosts``, all of them this machine's with the local launcher. ClipflowError
        naming the field (``plan.<key>``) and what it must be; the caller names the file."""
        where = "plan.roles"
        schedulers = [i for i, r in enumerate(self.roles) if r.role == "scheduler"]
        if schedulers != [0]:
            if not schedulers:
                raise ClipflowError(f"{where} has no scheduler; give it one, as its first role (plan.roles[0])")
            if len(schedulers) > 1:
                raise ClipflowError(f"{where} has {len(schedulers)} schedulers ({where}[{schedulers[0]}] and "
                                    f"[{schedulers[1]}]); give it one, as its first role (plan.roles[0])")  # fmt: skip
            raise ClipflowError(f"{where}[{schedulers[0]}] is the scheduler, but the scheduler must be the first role "
                                f"(plan.roles[0], now a {self.roles[0].role}); move it there")  # fmt: skip
        scheduler = self.roles[0]
        if scheduler.rank != 0:
            raise ClipflowError(f"{where}[0], the scheduler, has rank {scheduler.rank}; give it rank 0")
        if scheduler.address != self.root_uri:
            raise ClipflowError(
                f"{where}[0], the scheduler, is at address {scheduler.address} but plan.root_uri is {self.root_uri}, "
                "where every other role looks for it; make them the same address"
            )
        for role, count in (("worker", self.num_workers), ("server", self.num_servers)):
            _check_ranks(role, [r.rank for r in self.roles if r.role == role], count)
        self._check_hosts()

    def _check_hosts(self) -> None:
        hosts = {str(replace(parse_host(text, "plan.hosts"), slots=1)) for text in self.hosts}
        if self.launcher == "local":
            remote = [text for text in self.hosts if parse_host(text, "plan.hosts").host not in LOCAL_NAMES]
            if remote:
                raise ClipflowError(f"plan.launcher is local, which runs every role on this machine, but plan.hosts "
                                    f"names {remote[0]}; use hosts [localhost], or launcher ssh")  # fmt: skip
        for i, r in enumerate(self.roles):
            if r.host not in hosts:
                raise ClipflowError(
                    f"plan.roles[{i}] ({r.role} {r.rank}) is on {r.host}, which is not one of plan.hosts "
                    f"({', '.join(self.hosts)}); put it on one of them, or add its host to plan.hosts"
                )

    def write(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path, launching: bool = False) -> Plan:
        """The plan in ``path``; ``launching`` (a command that starts roles from it): its roles also checked
        against its counts and hosts (:meth:`check`), so that no job waits for a role the plan never starts (other
        commands, the checks of its hosts say, take a plan trimmed by hand as it is)."""
        path = Path(path)
        data = read_json_object(
            path, "cluster plan", "the JSON object clipflow cluster plan writes; rerun the cluster stage"
        )
        try:
            plan = cls.from_dict(data)
            if launching:
                plan.check()
        except ClipflowError as exc:
            raise ClipflowError(f"cluster plan {path}: {exc}; rerun the cluster stage") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ClipflowError(f"cluster plan {path} cannot be read ({exc}); rerun the cluster stage") from None
        return plan


def _check_ranks(role: str, ranks: list[int], count: int) -> None:
    """The plan's ``role`` roles have ``ranks``: they must be 0..count-1, each once (plan.num_<role>s)."""
    if sorted(ranks) == list(range(count)):
        return
    key = f"plan.num_{role}s"
    seen = Counter(ranks)
    twice = sorted(rank for rank, n in seen.items() if n > 1)
    outside = sorted(rank for rank in seen if not 0 <= rank < count)
    missing = sorted(set(range(count)) - seen.keys())
    if twice:
        fault = f"{role} {twice[0]} twice"
    elif outside:
        fault = f"a {role} {outside[0]}, outside 0..{count - 1}"
    else:
        fault = f"no {role} {missing[0]}"
    fix = f"give plan.roles one {role} for each rank 0..{count - 1}"
    if sorted(ranks) == list(range(len(ranks))):
        fix += f", or make {key} {len(ranks)}"
    if len(ranks) != count:
        has = f"{len(ranks)} {role}" + ("" if len(ranks) == 1 else "s")
        raise ClipflowError(f"{key} is {count} but plan.roles has {has} ({fault}); {fix}")
    raise ClipflowError(f"plan.roles has {fault} ({key} {count}); {fix}")


def place(
    hosts: list[Host], num_workers: int, num_servers: int, placement: str = "beside"
) -> list[tuple[str, int, Host]]:
    """(role, rank, host) for the scheduler, the servers and the workers."""
    if placement not in PLACEMENTS:
        raise ClipflowError(f"cluster.placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
    roles = [("scheduler", 0, hosts[0])]
    if placement == "cycle":
        order = [("server", r) for r in range(num_servers)] + [("worker", r) for r in range(num_workers)]
        return roles + [(role, rank, hosts[i % len(hosts)]) for i, (role, rank) in enumerate(order)]
    turns = [h for h in hosts for _ in range(h.slots)]
    roles += [("server", r, hosts[r % len(hosts)]) for r in range(num_servers)]
    roles += [("worker", r, turns[r % len(turns)]) for r in range(num_workers)]
    return roles


SOURCE_PORTS = 65535 - 1024 + 1  # the unprivileged ports a host can open connections from


def roles_per_host(hosts: list[Host], num_workers: int, num_servers: int, placement: str = "beside"
                   ) -> dict[str, tuple[int, int]]:  # fmt: skip
    """(workers, servers) each machine of ``hosts`` gets by :func:`place`, counted without listing the roles."""
    count: dict[str, list[int]] = {h.host: [0, 0] for h in hosts}
    if placement == "cycle":  # the servers, then the workers, dealt over the hosts in turn
        for i, h in enumerate(hosts):
            count[h.host][1] += len(range(i, num_servers, len(hosts)))
            count[h.host][0] += len(range((i - num_servers) % len(hosts), num_workers, len(hosts)))
    else:
        turns = [h for h in hosts for _ in range(h.slots)]
        full, rest = divmod(num_workers, len(turns))
        for i, h in enumerate(turns):
            count[h.host][0] += full + (i < rest)
        for i, h in enumerate(hosts):
            count[h.host][1] += len(range(i, num_servers, len(hosts)))
    return {host: (w, s) for host, (w, s) in count.items()}


def check_roles_per_host(hosts: list[Host], num_workers: int, num_servers: int, placement: str, backend: str) -> None:
    """No machine of the plan gets more roles than it could start: every role connects to the job's port
    (cluster.root_port: the scheduler's, or with ddp rank 0's store) from a port of its own on its machine, two
    connections a role with ps (its control and data sockets to the scheduler), one a worker with ddp (which has no
    servers), and a machine has :data:`SOURCE_PORTS` to open them from. ClipflowError naming the machine, the
    counts and the bound, before anything is built for them."""
    if not hosts:
        return  # make_plan names the missing hosts
    connections, servers = (2, num_servers) if backend == "ps" else (1, 0)
    most = SOURCE_PORTS // connections
    for host, (workers, on_host) in roles_per_host(hosts, num_workers, servers, placement).items():
        if workers + on_host > most:
            roles = f"{workers} workers" + (f" and {on_host} server{'s' if on_host > 1 else ''}" if on_host else "")
            raise ClipflowError(
                f"config: cluster.num_workers {num_workers} puts {roles} on {host}, more than a machine can start: "
                f"with train.backend {backend} each {'role' if servers else 'worker'} holds {connections} TCP "
                f"connection{'s' if connections > 1 else ''} to cluster.root_port from a port of its own, and a "
                f"machine has {SOURCE_PORTS} (1024-65535), so at most {most} on one host; give fewer workers or "
                "more hosts"
            )


def address_of(host: Host) -> str:
    """The IPv4/IPv6 address others reach ``host`` at (loopback names: 127.0.0.1)."""
    if host.host in LOCAL_NAMES:
        return "127.0.0.1"
    try:
        return socket.getaddrinfo(host.host, host.port, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError as exc:
        raise ClipflowError(f"cannot resolve host {host.host!r} ({exc}); check the hosts file or DNS") from None


def port_range() -> tuple[int, int]:
    """The scheduler's ports, as the config schema bounds cluster.root_port (no privileged port below 1024)."""
    port = config_setting("cluster", "root_port")
    return port["minimum"], port["maximum"]


def check_port(port: object, key: str = "cluster.root_port") -> None:
    """``port`` in :func:`port_range`, else an error naming ``key`` (the setting or flag) and the fix."""
    low, high = port_range()
    if is_int(port) and low <= port <= high:
        return
    privileged = " (below 1024 only root may listen)" if is_int(port) and 0 < port < low else ""
    raise ClipflowError(
        f"{key} must be a port in {low}-{high}, got {port!r}{privileged}; give a free port in that range, e.g. "
        f"{config_setting('cluster', 'root_port')['default']}"
    )


def check_settings(num_workers: int, num_servers: int, root_port: int, heartbeat_timeout: float) -> None:
    """Counts, the port and the timeout in their ranges, each named with its fix (the command line's flags are
    checked the same way as they are parsed; this guards every other caller)."""
    for key, count in (("num_workers", num_workers), ("num_servers", num_servers)):
        if not is_int(count) or count < 1:
            raise ClipflowError(f"cluster.{key} must be a whole number >= 1, got {count!r}; give 1 or more")
    check_port(root_port)
    if not is_number(heartbeat_timeout) or not math.isfinite(heartbeat_timeout) or heartbeat_timeout <= 0:
        raise ClipflowError(
            f"cluster.heartbeat_timeout must be a number of seconds > 0, got {heartbeat_timeout!r}; give the "
            "seconds of silence before a process is declared dead, e.g. 30"
        )


def check_reachable(hosts: list[Host], addresses: Mapping[Host, str]) -> None:
    """Every role advertises its host's address to the others (the scheduler's is DMLC_PS_ROOT_URI): a host on
    loopback cannot be reached from another machine, so a plan cannot mix loopback hosts with remote ones."""
    local = [h for h in hosts if is_loopback(addresses[h])]
    remote = [h for h in hosts if not is_loopback(addresses[h])]
    if not local or not remote:
        return
    where = "the scheduler's host" if local[0] == hosts[0] else "a host"
    address = "" if addresses[local[0]] == local[0].host else f" ({addresses[local[0]]})"
    raise ClipflowError(
        f"cluster.hosts: {where}, {local[0]}{address}, is on loopback, which the remote hosts "
        f"{', '.join(str(h) for h in remote)} cannot reach; name this machine by an address the other hosts "
        "reach (its name or IP on their network), or use only this machine (hosts: [localhost])"
    )


def make_plan(
    launcher: str,
    hosts: list[Host],
    num_workers: int,
    num_servers: int,
    root_port: int,
    heartbeat_timeout: float,
    security: str = "auto",
    keys_dir: str | Path = "",
    placement: str = "beside",
    ssh: dict[str, str] | None = None,
) -> Plan:
    """With security `auto`, CURVE whenever the scheduler is not on loopback; with CURVE the job's
    keys are made in keys_dir (kept when already there). ``ssh``: ssh_key, known_hosts, python and
    workdir for the ssh launcher."""
    if launcher not in LAUNCHERS:
        raise ClipflowError(f"cluster.launcher must be one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    if not hosts:
        raise ClipflowError("cluster.hosts is empty: name at least one host")
    check_settings(num_workers, num_servers, root_port, heartbeat_timeout)
    if launcher == "local" and any(h.host not in LOCAL_NAMES for h in hosts):
        raise ClipflowError(
            f"the local launcher runs every role on this machine, but cluster.hosts names "
            f"{[str(h) for h in hosts]}; use hosts: [localhost], or launcher: ssh"
        )
    # Slurm node names resolve inside the allocation (maybe not where the plan is made): roles use them as they are
    addresses = {h: h.host if launcher == "slurm" else address_of(h) for h in hosts}
    check_reachable(hosts, addresses)
    roles = [
        Role(role, rank, str(replace(h, slots=1)), addresses[h])
        for role, rank, h in place(hosts, num_workers, num_servers, placement)
    ]
    root_uri = roles[0].address
    if security not in SECURITY_MODES:
        raise ClipflowError(f"cluster.security must be auto, curve or none, not {security!r}")
    if security == "auto":
        security = "none" if is_loopback(root_uri) else "curve"
    if security == "curve" and not keys_dir:
        raise ClipflowError("CURVE security needs a folder for the job's keys")
    keys = str(Path(make_keys(keys_dir)).resolve()) if security == "curve" else ""
    return Plan(
        launcher,
        [str(h) for h in hosts],
        root_uri,
        root_port,
        num_workers,
        num_servers,
        heartbeat_timeout,
        roles,
        security,
        keys,
        placement,
        **(ssh or {}),
    )


def check_ports(plan: Plan) -> None:
    """The scheduler's port must be free where it will listen (local hosts only, for now)."""
    if plan.launcher == "local" and not port_free(plan.root_port):
        raise ClipflowError(
            f"port {plan.root_port} on {plan.roles[0].host} is in use (another clipflow run?); "
            "stop that process or set cluster.root_port to a free port"
        )


def insecure_addresses(plan: Plan) -> list[str]:
    """With ``cluster.security: none``, the plan's addresses beyond loopback (none: all traffic stays local)."""
    if plan.security != "none":
        return []
    return sorted({a for a in (plan.root_uri, *(r.address for r in plan.roles)) if not is_loopback(a)})


SECURITY_NONE = "cluster.security (--security) is none"
SECURITY_FIX = "Use cluster.security (--security) auto or curve (the plan then makes the job's keys)"


def check_security(plan: Plan, environ: Mapping[str, str] | None = None, setting: str = SECURITY_NONE,
                   fix: str = SECURITY_FIX) -> None:  # fmt: skip
    """``cluster.security: none`` with roles beyond loopback needs CLIPFLOW_PS_INSECURE=1 in ``environ`` (default:
    this process's environment), and then prints a warning; otherwise it is refused, naming the risk.
    ``setting``: what made the plan insecure, and ``fix``: the way out (`clipflow launch --mxnet` has its own)."""
    exposed = insecure_addresses(plan)
    if not exposed:
        return
    where = f"the plan's addresses {', '.join(exposed)}" if len(exposed) > 1 else f"the plan's address {exposed[0]}"
    if not read_env(environ).ps_insecure:
        raise ClipflowError(insecure_refusal(setting, where, fix))
    print(
        f"clipflow: warning: {setting} with {where}, beyond loopback, allowed by "
        "CLIPFLOW_PS_INSECURE=1: parameter-server messages are neither encrypted nor authenticated",
        file=sys.stderr,
    )


def plan_hosts(hosts_file: str, hosts: str, launcher: str = "", environ: Mapping[str, str] = os.environ) -> list[Host]:
    """The hosts a command names: the hosts file, else ``hosts`` (comma-separated), else localhost for the local
    launcher or the allocation's nodes for the Slurm one."""
    if launcher == "slurm":
        return slurm_hosts(hosts_file, hosts, environ)
    if hosts_file:
        return read_hosts_file(hosts_file)
    if hosts:
        return hosts_from_config([h.strip() for h in hosts.split(",") if h.strip()])
    if launcher == "local":
        return hosts_from_config(["localhost"])
    raise ClipflowError("no hosts: give --hosts-file FILE or --hosts a,b,c")


def slurm_hosts(hosts_file: str, hosts: str, environ: Mapping[str, str]) -> list[Host]:
    """The slurm launcher's hosts: the allocation's nodes, or the named ones, which must belong to the allocation
    when the plan is made inside one. A hosts file is refused: the allocation decides the nodes."""
    from clipflow.hosts.slurm import allocation_from_env, check_nodes_in_allocation

    if hosts_file:
        raise ClipflowError(
            f"a hosts file ({hosts_file}) was given with the slurm launcher, whose nodes are the Slurm allocation's: "
            "drop the hosts file (--hosts-file, -H, cluster.hosts_file), or use the ssh launcher to run on its hosts"
        )
    named = [h.strip() for h in hosts.split(",") if h.strip()]
    if not named:
        return [Host(node) for node in allocation_from_env(environ).nodes]
    if environ.get("SLURM_JOB_ID", "").strip():
        check_nodes_in_allocation([parse_host(h, "--hosts").host for h in named], allocation_from_env(environ))
    return hosts_from_config(named)


def ssh_fields(launcher: str, settings: SshSettings, python: str, workdir: str) -> dict[str, str]:
    """The plan's ssh settings (absolute paths: the launcher may run from elsewhere); none for other launchers.
    ``python`` and ``workdir`` default to this interpreter and this folder."""
    if launcher != "ssh":
        return {}
    return {
        "ssh_key": str(settings.key.absolute()),
        "known_hosts": str(settings.known_hosts.absolute()),
        "python": python or sys.executable,
        "workdir": workdir or os.getcwd(),
    }


def create_plan(out: str | Path, launcher: str, hosts: list[Host], num_workers: int, num_servers: int,
                root_port: int, heartbeat_timeout: float, security: str, placement: str,
                ssh: dict[str, str], environ: Mapping[str, str] | None = None) -> Plan:  # fmt: skip
    """The plan of these settings (CURVE keys, when needed, in ps_keys/ beside ``out``), its security
    (:func:`check_security`, with ``environ``) and its scheduler's port checked, written to ``out``."""
    plan = make_plan(launcher, hosts, num_workers, num_servers, root_port, heartbeat_timeout, security,
                     Path(out).parent / "ps_keys", placement, ssh)  # fmt: skip
    check_security(plan, environ)
    check_ports(plan)
    plan.write(out)
    return plan
