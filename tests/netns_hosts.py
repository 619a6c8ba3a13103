"""Three fake SSH hosts on one Linux machine, for multi-host tests (root only).

Topology (``T`` = ``cf<pid><2 letters>``, unique per NetnsHosts object, e.g. ``cf4242aa``; ``10.A.B.0/24`` a
subnet derived from the pid that nothing on this machine uses)::

    root network namespace                   network namespaces Th1 / Th2 / Th3
    ----------------------                   ----------------------------------
    bridge Tbr 10.A.B.1/24 --+-- Tv1 <==veth==> eth0 10.A.B.11/24  sshd :22, ~ = <state>/h1/home
                             +-- Tv2 <==veth==> eth0 10.A.B.12/24  sshd :22, ~ = <state>/h2/home
                             +-- Tv3 <==veth==> eth0 10.A.B.13/24  sshd :22, ~ = <state>/h3/home

The test process (root namespace) reaches every host at its address, and the hosts reach each other
through the bridge. Each sshd runs inside its host's network namespace *and* a private mount namespace
in which that host's own home directory is bind-mounted over ``/root`` (with the folder of this Python's
installation, when it lies under /root, mounted back inside it); apart from ``/root`` the hosts
share this machine's file system (so the repository and its virtualenv are visible on every host).

Logins use an "admin" key pair made by the fixture, standing for the access a user has before clipflow
distributes its own key: every sshd reads ``.ssh/authorized_keys`` (in the host's home, initially
absent) *and* a shared, root-owned ``authorized_keys`` file holding the admin public key. An ssh-agent
started by the fixture holds the admin private key (``agent_env``).

All files live in one directory ``/run/clipflow-netns-P-*`` (mode 755 with a root-owned, 755 parent
chain, as sshd's StrictModes requires; ``/tmp`` is world-writable and would be refused). Everything
created - namespaces, links, processes, the agent, that directory - is removed on exit, also when setup
fails halfway. Leftovers of runs that were killed (their pid is gone) are removed on the next start.

Note: the OpenSSH *client* ignores ``$HOME`` (it uses the passwd entry, ``/root``), so a launcher that
runs ``ssh`` must either pass explicit options or be run with :meth:`NetnsHosts.run_local`, which
mounts ``local_home`` over ``/root`` for that command only. Python SSH libraries (paramiko/fabric)
honour ``$HOME``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

NUM_HOSTS = 3


def shared_under_root() -> list[Path]:
    """Folders under /root the hosts must still see, though each has its own /root: the one holding this
    Python's installation (pyenv keeps it in /root/.pyenv; a venv's interpreter links there)."""
    base = Path(os.path.realpath(sys.base_prefix))
    if base.parts[:2] != ("/", "root") or len(base.parts) < 3:
        return []
    return [Path("/root", base.parts[2])]


def make_home(path: Path) -> Path:
    """An empty home (mode 700), but for the mount points of :func:`shared_under_root`."""
    home = make_dir(path, 0o700)
    for shared in shared_under_root():
        (home / shared.name).mkdir(mode=0o755)
    return home


SSHD = "/usr/sbin/sshd"  # sshd must be started by absolute path (it re-executes itself)
REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "ssh-keygen", "ssh-agent", "ssh-add")
STATE_ROOT = Path("/run")
STATE_PREFIX = "clipflow-netns-"
NAME_RE = re.compile(r"^cf(\d+)[a-z]{2}(?:h\d|br|v\d)$")  # cf<pid><instance><suffix>
READY_TIMEOUT_S = 10.0
_instances = 0  # NetnsHosts made by this process: part of the names, so two can coexist


@dataclass
class FakeHost:
    """One fake host: a network namespace with its own address, sshd and home directory for root."""

    name: str  # network namespace name, e.g. "cf1234aah1"
    address: str  # IPv4 address, e.g. "10.104.210.11"
    port: int  # sshd port (22)
    user: str  # login user ("root")
    home: Path  # the host's ~ as seen from the test (root namespace); /root on the host
    host_key_pub: Path  # the current ed25519 host public key
    state_dir: Path  # sshd_config, host key, pid file and sshd.log of this host
    veth: str  # root-namespace end of the host's veth pair (the inner end is "eth0")

    @property
    def target(self) -> str:
        """``user@address``, e.g. ``root@10.104.210.11``."""
        return f"{self.user}@{self.address}"

    def __str__(self) -> str:
        return self.target

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "sshd.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "sshd.log"


# ---------------------------------------------------------------- small helpers


def sh(*argv: str | os.PathLike[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; on failure raise with its stderr."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def unavailable_reason() -> str | None:
    """Why fake hosts cannot be made here (not root, missing tools, ``ip netns`` unusable), or None."""
    if not sys.platform.startswith("linux"):
        return "fake hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "fake hosts need root (ip netns, mount --bind)"
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None] + ([SSHD] if not os.access(SSHD, os.X_OK) else [])
    if missing:
        return f"fake hosts need {', '.join(missing)}"
    try:
        import pwd

        pwd.getpwnam("sshd")
    except KeyError:
        return "sshd's privilege separation user 'sshd' does not exist"
    probe = f"cf{os.getpid()}probe"
    try:
        created = sh("ip", "netns", "add", probe, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"'ip netns add' unusable: {exc}"
    if created.returncode != 0:
        return f"'ip netns add' unusable: {created.stderr.strip()}"
    sh("ip", "netns", "delete", probe, check=False)
    return None


def netns_names() -> list[str]:
    """Names of all network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line.strip()]


def link_names() -> list[str]:
    """Names of all links in the root namespace (``ip -o link``), without the ``@peer`` suffix."""
    out = sh("ip", "-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def netns_pids(netns: str) -> list[int]:
    """Pids of all processes in a network namespace (``ip netns pids``); [] if it does not exist."""
    proc = sh("ip", "netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when the test process dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 == PR_SET_PDEATHSIG


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (an exited child its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def kill_pids(pids: Sequence[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed; return its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def tcp_accepts(address: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if a TCP connection to ``address:port`` succeeds (from the root namespace)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def subnets_in_use() -> list[ipaddress.IPv4Network]:
    """IPv4 networks of this machine's addresses and (non-default) routes."""
    nets = []
    for line in sh("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        match = re.search(r"inet (\S+)", line)
        if match:
            nets.append(ipaddress.IPv4Interface(match.group(1)).network)
    for line in sh("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest and dest[0].isdigit() and dest not in ("0.0.0.0/0",):
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.IPv4Network(dest, strict=False))
    return nets


def pick_subnet(pid: int) -> ipaddress.IPv4Network:
    """A /24 in 10.100.0.0-10.199.255.0 derived from ``pid`` that overlaps nothing in use."""
    used = subnets_in_use()
    for step in range(100 * 256):
        n = (pid + step) % (100 * 256)
        candidate = ipaddress.IPv4Network(f"10.{100 + n // 256}.{n % 256}.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise RuntimeError("no free /24 in 10.100.0.0 - 10.199.255.255")


def make_state_dir() -> Path:
    """A fresh root-owned mode-755 directory whose parents are acceptable to sshd's StrictModes."""
    path = Path(tempfile.mkdtemp(prefix=f"{STATE_PREFIX}{os.getpid()}-", dir=STATE_ROOT))
    path.chmod(0o755)
    for parent in [path, *path.parents]:
        st = parent.stat()
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise RuntimeError(f"{parent} must be root-owned and not group/world-writable (sshd StrictModes)")
    return path


def make_dir(path: Path, mode: int) -> Path:
    path.mkdir(mode=mode)
    path.chmod(mode)  # mkdir's mode is filtered by the umask
    return path


def generate_key(path: Path, comment: str) -> None:
    """A new ed25519 key pair without passphrase at ``path`` / ``path.pub`` (replacing an old one)."""
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path)


def root_password_locked() -> bool:
    """True if root's shadow entry starts with '!': sshd with ``UsePAM no`` then refuses every login."""
    with contextlib.suppress(OSError):
        for line in Path("/etc/shadow").read_text().splitlines():
            if line.startswith("root:"):
                return line.split(":")[1].startswith("!")
    return False


def ensure_privsep_dir() -> None:
    """sshd needs /run/sshd (root-owned, not group/world writable). Left in place: other sshds use it."""
    path = Path("/run/sshd")
    if not path.is_dir():
        path.mkdir(mode=0o755, exist_ok=True)


def pids_mentioning(text: str) -> list[int]:
    """Pids of processes whose command line contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


def remove_stale_leftovers() -> None:
    """Remove namespaces, links and state dirs of earlier runs whose process no longer exists."""

    def stale(name: str) -> bool:
        match = NAME_RE.match(name)
        return bool(match) and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1)))

    for netns in filter(stale, netns_names()):
        kill_pids(netns_pids(netns))
        sh("ip", "netns", "delete", netns, check=False)
    for link in filter(stale, link_names()):
        sh("ip", "link", "delete", link, check=False)
    for path in STATE_ROOT.glob(f"{STATE_PREFIX}*"):
        pid = path.name[len(STATE_PREFIX) :].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            kill_pids(pids_mentioning(str(path)))  # its ssh-agent (setgid, so die_with_parent did not hold)
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- the fixture object


class NetnsHosts:
    """Context manager making three fake SSH hosts (see the module docstring for the topology).

    Public attributes (valid inside the ``with`` block):

    - ``hosts``: list of three :class:`FakeHost` (index 0..2).
    - ``admin_key``: Path of the admin private key (authorised on every host; also in the agent).
    - ``agent_env``: ``{"SSH_AUTH_SOCK": ..., "SSH_AGENT_PID": ...}`` of the fixture's ssh-agent;
      merge it into an environment: ``env={**os.environ, **h.agent_env}``.
    - ``local_home``: an empty mode-700 directory to use as HOME of the launching side.
    - ``subnet``: the hosts' ``ipaddress.IPv4Network``; ``gateway``: the bridge address (the root namespace).
    """

    def __init__(self) -> None:
        global _instances
        self.pid = os.getpid()
        self.tag = f"cf{self.pid}{chr(97 + _instances // 26 % 26)}{chr(97 + _instances % 26)}"  # e.g. "cf1234aa"
        _instances += 1
        self.hosts: list[FakeHost] = []
        self.admin_key = Path()
        self.agent_env: dict[str, str] = {}
        self.local_home = Path()
        self.subnet = ipaddress.IPv4Network("0.0.0.0/32")
        self.gateway = ""
        self.bridge = f"{self.tag}br"
        self._state: Path | None = None
        self._netns: list[str] = []  # created namespaces
        self._links: list[str] = []  # created root-namespace links (veths, bridge last)
        self._sshd: dict[int, subprocess.Popen[bytes]] = {}  # host index -> running sshd master
        self._agent: subprocess.Popen[bytes] | None = None
        self._admin_keys_file = Path()
        self._shadow_override: Path | None = None
        self._mounts: list[tuple[int, str]] = []  # (host index, path) mounted in a host's sshd mount namespace

    # -- context manager

    def __enter__(self) -> NetnsHosts:
        reason = unavailable_reason()
        if reason:
            pytest.skip(reason)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        problems = self.close()
        if problems and exc_type is None:
            raise RuntimeError("fake hosts not fully cleaned up: " + "; ".join(problems))

    def _setup(self) -> None:
        remove_stale_leftovers()
        ensure_privsep_dir()
        self._state = make_state_dir()
        self.subnet = pick_subnet(self.pid)
        self.gateway = str(self.subnet.network_address + 1)
        self._make_bridge()
        self._make_admin_key()
        self._start_agent()
        self.local_home = make_dir(self._state / "launcher_home", 0o700)
        if root_password_locked():
            self._shadow_override = self._make_shadow_override()
        for i in range(NUM_HOSTS):
            self.hosts.append(self._make_host(i))
        for i in range(NUM_HOSTS):
            self.start_sshd(i)

    # -- setup steps

    def _make_bridge(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        sh("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def _make_admin_key(self) -> None:
        admin_dir = make_dir(self._state_dir / "admin", 0o755)
        self.admin_key = admin_dir / "id_ed25519"
        generate_key(self.admin_key, "clipflow-test-admin")
        self._admin_keys_file = admin_dir / "authorized_keys"
        shutil.copyfile(self.admin_key.with_suffix(".pub"), self._admin_keys_file)
        self._admin_keys_file.chmod(0o644)

    def _start_agent(self) -> None:
        sock = make_dir(self._state_dir / "agent", 0o700) / "agent.sock"
        self._agent = subprocess.Popen(
            ["ssh-agent", "-D", "-a", str(sock)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        if not wait_until(sock.exists, READY_TIMEOUT_S):
            raise RuntimeError("ssh-agent did not create its socket")
        self.agent_env = {"SSH_AUTH_SOCK": str(sock), "SSH_AGENT_PID": str(self._agent.pid)}
        added = subprocess.run(
            ["ssh-add", "-q", str(self.admin_key)], env={**os.environ, **self.agent_env}, capture_output=True, text=True
        )
        if added.returncode != 0:
            raise RuntimeError(f"ssh-add failed: {added.stderr.strip()}")

    def _make_shadow_override(self) -> Path:
        """A copy of /etc/shadow with root unlocked ('*'), bind-mounted only in the sshds' mount namespaces."""
        lines = Path("/etc/shadow").read_text().splitlines(keepends=True)
        fixed = [re.sub(r"^root:![^:]*:", "root:*:", line) for line in lines]
        path = self._state_dir / "shadow"
        path.touch(mode=0o600)
        path.write_text("".join(fixed))
        return path

    def _make_host(self, i: int) -> FakeHost:
        name, veth = f"{self.tag}h{i + 1}", f"{self.tag}v{i + 1}"
        address = str(self.subnet.network_address + 11 + i)
        sh("ip", "netns", "add", name)
        self._netns.append(name)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        self._links.insert(0, veth)
        sh("ip", "link", "set", veth, "master", self.bridge, "up")
        sh("ip", "-n", name, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        sh("ip", "-n", name, "link", "set", "eth0", "up")
        sh("ip", "-n", name, "link", "set", "lo", "up")
        state_dir = make_dir(self._state_dir / f"h{i + 1}", 0o755)
        host = FakeHost(
            name=name,
            address=address,
            port=22,
            user="root",
            home=make_home(state_dir / "home"),
            host_key_pub=state_dir / "ssh_host_ed25519_key.pub",
            state_dir=state_dir,
            veth=veth,
        )
        generate_key(self._host_key(host), f"{name}-hostkey")
        (state_dir / "sshd_config").write_text(self._sshd_config(host))
        return host

    def _sshd_config(self, host: FakeHost) -> str:
        return "\n".join(
            [
                f"ListenAddress {host.address}:{host.port}",
                f"HostKey {self._host_key(host)}",
                f"PidFile {host.pid_file}",
                f"AuthorizedKeysFile .ssh/authorized_keys {self._admin_keys_file}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes yes",
                "ClientAliveInterval 2",
                "ClientAliveCountMax 3",
                "MaxStartups 100",
                "MaxSessions 100",
                "PrintMotd no",
                "Subsystem sftp internal-sftp",
                "",
            ]
        )

    @staticmethod
    def _host_key(host: FakeHost) -> Path:
        return host.host_key_pub.with_suffix("")

    @property
    def _state_dir(self) -> Path:
        assert self._state is not None, "NetnsHosts used outside its with-block"
        return self._state

    # -- public API

    def run_in(self, i: int, argv: Sequence[str | os.PathLike[str]], **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` in host ``i``'s network namespace (``ip netns exec``; same file system, real /root).

        Keyword arguments go to :func:`subprocess.run` (e.g. ``capture_output=True, text=True``).
        """
        return subprocess.run(["ip", "netns", "exec", self.hosts[i].name, *map(str, argv)], **kw)

    def run_local(self, argv: Sequence[str | os.PathLike[str]], **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` as the launching side: root namespace, ``local_home`` mounted over /root.

        The command sees ``HOME`` = ``local_home``, ``/root`` = ``local_home`` (so the OpenSSH client's
        ``~/.ssh`` is ``local_home/.ssh``) and the fixture's agent in ``SSH_AUTH_SOCK`` unless ``env`` is
        given. Keyword arguments go to :func:`subprocess.run`.
        """
        env = kw.pop("env", None) or {**os.environ, **self.agent_env, "HOME": str(self.local_home)}
        script = 'mount --bind "$1" /root && shift && exec "$@"'
        wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(self.local_home)]
        return subprocess.run([*wrapped, *map(str, argv)], env=env, **kw)

    def sshd_pid(self, i: int) -> int | None:
        """Pid of host ``i``'s sshd listener (from its PidFile), or None when it is not running."""
        proc = self._sshd.get(i)
        if proc is None or proc.poll() is not None:
            return None
        with contextlib.suppress(OSError, ValueError):
            return int(self.hosts[i].pid_file.read_text().strip())
        return proc.pid

    def pids(self, i: int) -> list[int]:
        """Pids of the processes in host ``i``'s namespace other than its sshd listener.

        This includes the per-connection sshd processes of any open (or just closing) SSH session, besides
        whatever the sessions started. [] means the host is idle.
        """
        listener = self.sshd_pid(i)
        return sorted(p for p in netns_pids(self.hosts[i].name) if p != listener)

    def start_sshd(self, i: int, *, new_host_key: bool = False) -> None:
        """(Re)start host ``i``'s sshd and wait until it accepts TCP connections.

        Keeps the host key unless ``new_host_key``; a running sshd is stopped first.
        """
        host = self.hosts[i]
        self.stop_sshd(i)
        if new_host_key:
            generate_key(self._host_key(host), f"{host.name}-hostkey")
        host.pid_file.unlink(missing_ok=True)
        shared = "".join(f'mount --bind {q} "$1"/{q.name} && ' for q in shared_under_root())  # e.g. pyenv's Python
        mounts = f'{shared}mount --rbind "$1" /root && {self._mount_shadow()}exec {SSHD} -D -e -f "$2"'
        argv = ["ip", "netns", "exec", host.name, "unshare", "--mount", "--propagation", "private"]
        argv += ["sh", "-c", mounts, "sh", str(host.home), str(host.state_dir / "sshd_config")]
        with open(host.log_file, "ab") as log:
            self._sshd[i] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=die_with_parent
            )
        self._wait_sshd_ready(i)

    def _mount_shadow(self) -> str:
        return f"mount --bind {self._shadow_override} /etc/shadow && " if self._shadow_override else ""

    def _wait_sshd_ready(self, i: int) -> None:
        host, proc = self.hosts[i], self._sshd[i]

        def ready() -> bool:
            if proc.poll() is not None:
                return True  # exited: stop waiting, reported below
            pid_written = host.pid_file.exists() and host.pid_file.read_text().strip() == str(proc.pid)
            return pid_written and tcp_accepts(host.address, host.port)

        if not wait_until(ready, READY_TIMEOUT_S, 0.05) or proc.poll() is not None:
            self.stop_sshd(i)
            log = host.log_file.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"sshd of {host.name} ({host.address}:{host.port}) did not come up; its log:\n{log}")

    def stop_sshd(self, i: int) -> None:
        """Stop host ``i``'s sshd listener (SIGTERM, then SIGKILL). Open sessions are left running."""
        proc = self._sshd.pop(i, None)
        if proc is None:
            return
        self._mounts = [(j, path) for j, path in self._mounts if j != i]  # they go with its mount namespace
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.hosts[i].pid_file.unlink(missing_ok=True)

    def change_host_key(self, i: int) -> None:
        """Give host ``i`` a new ed25519 host key and restart its sshd with it."""
        self.start_sshd(i, new_host_key=True)

    def link_down(self, i: int) -> None:
        """Cut host ``i`` off the network: set the root-side end of its veth down.

        Packets to and from the host are then silently dropped (no 'unreachable' errors), like a pulled
        cable; established TCP connections hang until timeouts (sshd's ClientAlive: about 6 s).
        """
        sh("ip", "link", "set", self.hosts[i].veth, "down")

    def link_up(self, i: int) -> None:
        """Reconnect host ``i`` (undo :meth:`link_down`) and wait until its sshd accepts again: the bridge
        port forwards only some moments after the link is up, and a check made in between would find the
        host still cut off."""
        host = self.hosts[i]
        sh("ip", "link", "set", host.veth, "up")
        if not wait_until(lambda: tcp_accepts(host.address, host.port), READY_TIMEOUT_S, 0.05):
            raise RuntimeError(
                f"{host.name} ({host.address}:{host.port}) does not answer {READY_TIMEOUT_S} s after its link came up"
            )

    def kill_all_in(self, i: int) -> None:
        """SIGKILL every process in host ``i``'s namespace except its sshd listener; wait until they are gone."""
        for _ in range(20):  # repeat: processes may fork while being killed
            victims = self.pids(i)
            if not victims:
                return
            kill_pids(victims)
            wait_until(lambda: not self.pids(i), 0.5)
        raise RuntimeError(f"processes survive in {self.hosts[i].name}: {self.pids(i)}")

    # -- a host's own mounts (its sshd's mount namespace; sessions started afterwards see them)

    def in_mounts(self, i: int, script: str, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        """Run ``sh -c script`` (``$1``... = ``args``) in host ``i``'s mount namespace, that of its sshd."""
        pid = self.sshd_pid(i)
        if pid is None:
            raise RuntimeError(f"host {i}'s sshd is not running: its mount namespace is gone")
        return sh("nsenter", "--target", str(pid), "--mount", "sh", "-c", script, "sh", *args)

    def _mounted(self, i: int, script: str, path: str | os.PathLike[str], *args: str) -> None:
        self.in_mounts(i, script, path, *args)
        self._mounts.append((i, str(path)))

    def mount_tmpfs(self, i: int, path: str | os.PathLike[str], size: str) -> None:
        """A tmpfs of ``size`` (e.g. ``64k``) at ``path`` (made when missing) inside host ``i`` only."""
        self._mounted(i, 'mkdir -p "$1" && mount -t tmpfs -o size="$2" tmpfs "$1"', path, size)

    def mount_readonly(self, i: int, path: str | os.PathLike[str]) -> None:
        """``path`` (which must exist) read-only inside host ``i`` only."""
        self._mounted(i, 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"', path)

    def hide_program(self, i: int, path: str | os.PathLike[str]) -> None:
        """/dev/null bound over the program ``path`` inside host ``i`` only: it is no longer executable there."""
        self._mounted(i, 'mount --bind /dev/null "$1"', path)

    def unmount(self, i: int, path: str | os.PathLike[str]) -> None:
        """Undo the latest of :meth:`mount_tmpfs`, :meth:`mount_readonly`, :meth:`hide_program` at ``path``."""
        self.in_mounts(i, 'umount "$1"', path)
        self._mounts.reverse()
        self._mounts.remove((i, str(path)))
        self._mounts.reverse()

    def _unmount_all(self) -> list[str]:
        problems = []
        for i, path in reversed(self._mounts):
            try:
                self.in_mounts(i, 'umount "$1"', path)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                if self.sshd_pid(i) is not None:  # else the namespace, and its mounts, end with its processes
                    problems.append(f"host {i}: {path} not unmounted ({exc})")
        self._mounts = []
        return problems

    # -- teardown

    def close(self) -> list[str]:
        """Remove everything this object created; safe to call repeatedly. Returns what could not be removed.

        Order: sshd listeners, every other process in the namespaces, veth pairs, namespaces, bridge, agent,
        files.
        """
        problems: list[str] = self._unmount_all()
        for i in list(self._sshd):
            with contextlib.suppress(Exception):
                self.stop_sshd(i)
        problems += self._kill_namespace_processes()
        problems += self._delete_links([link for link in self._links if link != self.bridge])
        problems += self._delete_namespaces()
        problems += self._delete_links(self._links)
        self._stop_agent()
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)
            if self._state.exists():
                problems.append(f"{self._state} not removed")
            else:
                self._state = None
        return problems

    def _kill_namespace_processes(self) -> list[str]:
        problems = []
        for netns in self._netns:
            for _ in range(100):  # repeat: processes may fork while being killed
                pids = netns_pids(netns)
                if not pids:
                    break
                kill_pids(pids)
                time.sleep(0.02)
            else:
                problems.append(f"processes survive in {netns}: {netns_pids(netns)}")
        return problems

    def _delete_links(self, links: list[str]) -> list[str]:
        for link in list(links):
            sh("ip", "link", "delete", link, check=False)  # a veth's peer goes with it
        existing = set(link_names())
        self._links = [link for link in self._links if link in existing]
        return [f"link {link} not deleted" for link in links if link in existing]

    def _delete_namespaces(self) -> list[str]:
        for netns in self._netns:
            sh("ip", "netns", "delete", netns, check=False)
        existing = set(netns_names())
        self._netns = [netns for netns in self._netns if netns in existing]
        return [f"netns {netns} not deleted" for netns in self._netns]

    def _stop_agent(self) -> None:
        if self._agent is not None:
            if self._agent.poll() is None:
                self._agent.kill()
            self._agent.wait(timeout=5)
            self._agent = None


@pytest.fixture(scope="module")
def ssh_hosts() -> Iterator[NetnsHosts]:
    """Three fake SSH hosts (a :class:`NetnsHosts`), shared by the tests of one module; skips unless root."""
    with NetnsHosts() as hosts:
        yield hosts
