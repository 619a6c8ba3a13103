"""A real Slurm cluster on the three network-namespace hosts of :class:`netns_hosts.NetnsHosts` (root only).

What runs, all from Debian's packages (``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``)::

    root namespace: munged (its own key and socket), slurmctld on the bridge address (ports picked free)
    host 1 / 2 / 3: slurmd -N n1 / n2 / n3, each in its host's network namespace, its own UTS namespace
                    (``hostname`` answers n1...) and a private mount namespace in which an /etc/hosts
                    naming n1..n3 and the controller is bound over the machine's, so node names resolve
                    inside jobs as a cluster's DNS would, and the cluster's folder over /etc/slurm, so
                    slurm.conf is where a node's clients look by default

The configuration needs no cgroups (``proctrack/linuxproc``, ``task/none``, ``jobacct_gather/none``, no
accounting storage) and keeps every state, spool, pid and log file in the cluster's own folder. The slurmds
keep the machine's /sys (``nsenter --net`` rather than ``ip netns exec``, which mounts a fresh sysfs without
/sys/fs/cgroup, where slurmd's cgroup plugin looks even when nothing uses it). Jobs run as root on the machine's
file system: the repository and its virtualenv are the same path on every node, like a cluster's shared disk.

Clients (``srun``, ``sbatch``, ``squeue``, ``scancel``, ``scontrol``) find this cluster through ``SLURM_CONF``:
run them with :attr:`SlurmCluster.env`. On exit every job is cancelled, ``squeue`` must come back empty, the
daemons are stopped and nothing may be left in the namespaces; then the hosts go.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from helpers import free_port
from netns_hosts import NetnsHosts, die_with_parent, kill_pids, wait_until

from clipflow.train.requeue import job_facts

DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey")
CLIENTS = ("srun", "sbatch", "salloc", "squeue", "scancel", "scontrol", "sinfo")
PARTITION = "main"
READY_TIMEOUT_S = 30.0


# The job states in which a job has ended for good (squeue's man page, JOB STATE CODES)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}  # fmt: skip


def missing_tools() -> list[str]:
    """The Slurm and munge programs this machine lacks (``.ci/run`` installs them from Debian's packages)."""
    return [tool for tool in (*DAEMONS, *CLIENTS) if shutil.which(tool) is None]


class SlurmCluster:
    """Context manager: munged, slurmctld and one slurmd per netns host; see the module docstring.

    Attributes (inside the ``with`` block): ``hosts`` (the :class:`NetnsHosts`), ``nodes`` (["n1", "n2", "n3"]),
    ``address`` (node name -> its address), ``env`` (this process's environment with ``SLURM_CONF``), ``state``
    (the folder of the configuration, logs and spools).
    """

    def __init__(self, hosts: NetnsHosts, state: Path) -> None:
        self.hosts = hosts
        self.state = state
        self.nodes = [f"n{i + 1}" for i in range(len(hosts.hosts))]
        self.address = {node: host.address for node, host in zip(self.nodes, hosts.hosts, strict=True)}
        self.env: dict[str, str] = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
        self._daemons: list[subprocess.Popen[bytes]] = []  # munged, slurmctld, then the slurmds

    # -- start

    def __enter__(self) -> SlurmCluster:
        missing = missing_tools()
        if missing:
            needs = ", ".join(missing)
            pytest.skip(f"a real Slurm cluster needs {needs} (Debian: slurmctld slurmd slurm-client munge)")
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        problems = self.close()
        if problems and exc_type is None:
            raise RuntimeError("Slurm cluster not fully cleaned up: " + "; ".join(problems))

    def _start(self) -> None:
        self.state.mkdir(parents=True)
        for sub in ("ctld", *(f"spool-{node}" for node in self.nodes)):
            (self.state / sub).mkdir()
        self._start_munged()
        (self.state / "hosts").write_text(self._hosts_file())
        (self.state / "slurm.conf").write_text(self._config())
        self._daemons.append(self._spawn(["slurmctld", "-D", "-i"], "slurmctld.out"))
        for node, host in zip(self.nodes, self.hosts.hosts, strict=True):
            # the configuration also at Slurm's default path, as on a cluster's nodes: a client started in a job
            # without SLURM_CONF (the executor plugin's srun keeps only a few SLURM_* variables) finds it there
            script = (
                'mount --bind "$1" /etc/hosts && mount --bind "$4" /etc/slurm && hostname "$2" && '
                'exec nsenter --net="$3" slurmd -D -N "$2"'
            )
            argv = ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script, "sh"]
            argv += [str(self.state / "hosts"), node, f"/run/netns/{host.name}", str(self.state)]
            self._daemons.append(self._spawn(argv, f"slurmd-{node}.out"))
        if not wait_until(self._all_idle, READY_TIMEOUT_S, 0.2):
            raise RuntimeError(f"the Slurm nodes did not come up idle: {self._sinfo()!r}\n{self.logs()}")

    def _start_munged(self) -> None:
        key = self.state / "munge.key"
        subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True)
        key.chmod(0o600)
        argv = ["munged", "--foreground", "--force", "--key-file", str(key), "--socket", str(self._munge_socket)]
        argv += ["--pid-file", str(self.state / "munged.pid"), "--log-file", str(self.state / "munged.log")]
        argv += ["--seed-file", str(self.state / "munge.seed")]
        self._daemons.append(self._spawn(argv, "munged.out"))
        if not wait_until(self._munge_socket.exists, READY_TIMEOUT_S, 0.05):
            raise RuntimeError(f"munged did not make its socket {self._munge_socket}\n{self.logs()}")

    @property
    def _munge_socket(self) -> Path:
        return self.state / "munge.sock"

    def _spawn(self, argv: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        with open(self.state / log_name, "ab") as log:
            return subprocess.Popen(
                list(argv), env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=die_with_parent
            )

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", f"{self.hosts.gateway} {socket.gethostname()}"]
        return "\n".join(lines + [f"{addr} {node}" for node, addr in self.address.items()]) + "\n"

    def _config(self) -> str:
        st = self.state
        nodes = [
            f"NodeName={node} NodeAddr={addr} CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN"
            for node, addr in self.address.items()
        ]
        return "\n".join(
            [
                "ClusterName=clipflowtest",
                f"SlurmctldHost={socket.gethostname()}({self.hosts.gateway})",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                # cred_expire (default 120 s) is also how long a requeued job waits before it may start again
                # (its begin time is the requeue + cred_expire + 1 s), and the scheduler starts it at its next pass
                # after that (every 60 s, backfill every 30 s by default): 15 s and passes every 2 s bring a requeue
                # from ~56 s (30 s and the default passes) down to ~17 s, and 15 s is still ample for a step's launch
                f"AuthInfo=socket={self._munge_socket},cred_expire=15",
                "SchedulerParameters=sched_interval=2,bf_interval=2",
                "MpiDefault=none",
                "GresTypes=gpu",  # a resource this cluster knows, though none of its nodes has one
                # a job's processes by their process group, not by descent from its slurmstepd: a batch script's
                # shell dies of the SIGTERM of a requeue or cancel at once, and the Snakemake it started (handling
                # SIGTERM gracefully) is then no child of the step, so linuxproc's SIGKILL never found it (CI: one
                # left on n1 after the requeue chain). Every process of a step keeps the step's group: the roles
                # are tasks of their own steps, and the launcher's srun clients end with their steps
                "ProctrackType=proctrack/pgid",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "SchedulerType=sched/backfill",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "ReturnToService=2",
                "KillWait=5",
                "MinJobAge=600",  # finished jobs stay in squeue/scontrol for a while, as the executor plugin wants
                "MailProg=/bin/true",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                f"StateSaveLocation={st / 'ctld'}",
                f"SlurmdSpoolDir={st}/spool-%n",
                f"SlurmctldPidFile={st / 'slurmctld.pid'}",
                f"SlurmdPidFile={st}/slurmd-%n.pid",
                f"SlurmctldLogFile={st / 'slurmctld.log'}",
                f"SlurmdLogFile={st}/slurmd-%n.log",
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                *nodes,
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
                "",
            ]
        )

    def _sinfo(self) -> str:
        done = self.run(["sinfo", "--noheader", "--format=%N %t"], check=False)
        return (done.stdout + done.stderr).strip()

    def _all_idle(self) -> bool:
        if any(p.poll() is not None for p in self._daemons):
            raise RuntimeError(f"a Slurm daemon exited while starting\n{self.logs()}")
        done = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], check=False)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return done.returncode == 0 and all(states.get(node) == "idle" for node in self.nodes)

    # -- use

    def run(self, argv: Sequence[str | os.PathLike[str]], check: bool = True, timeout: float = 60, **kw):
        """A Slurm client command here (root namespace) with ``SLURM_CONF``; text output captured."""
        done = subprocess.run(
            [str(a) for a in argv], env=kw.pop("env", self.env), capture_output=True, text=True, timeout=timeout, **kw
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def job_ids(self) -> list[str]:
        """Jobs the controller still runs or queues (``squeue``)."""
        return self.run(["squeue", "--noheader", "--format=%i"]).stdout.split()

    def job_state(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, ExitCode, NodeList, TimeLimit, TresPerNode...)."""
        return job_facts(job_id, self.env)

    def wait_job(self, job_id: str, timeout_s: float) -> dict[str, str]:
        """Wait until the job has ended: one of Slurm's final states (COMPLETED, FAILED, CANCELLED, TIMEOUT...). Any
        other is a job still on its way, the passing ones included: a run here read SIGNALING (a --signal warning
        being sent, in a requeued allocation) and took it for the end."""
        info: dict[str, str] = {}

        def ended() -> bool:
            nonlocal info
            info = self.job_state(job_id)
            return info.get("JobState") in FINAL_STATES

        if not wait_until(ended, timeout_s, 0.5):
            raise TimeoutError(f"job {job_id} still {info.get('JobState')} after {timeout_s} s\n{self.logs()}")
        return info

    def node_processes(self) -> dict[str, list[str]]:
        """Per node, the command lines of processes other than its slurmd (job steps, roles) still alive."""
        daemons = {p.pid for p in self._daemons}
        left: dict[str, list[str]] = {}
        for i, node in enumerate(self.nodes):
            for pid in self.hosts.pids(i):  # all but the host's sshd listener
                with contextlib.suppress(OSError):
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    if pid not in daemons and not cmd.startswith(("slurmd ", "nsenter ", "unshare ")):
                        left.setdefault(node, []).append(f"{pid} {cmd.strip()}")
        return left

    def wait_quiet(self, timeout_s: float = 30) -> None:
        """Wait until no job is queued or running and no process but the slurmds is left on any node; else raise."""
        if not wait_until(lambda: not self.job_ids() and not self.node_processes(), timeout_s, 0.25):
            raise AssertionError(f"left behind: jobs {self.job_ids()}, processes {self.node_processes()}")

    def clear(self, timeout_s: float = 30) -> list[str]:
        """End whatever a test left: cancel every job, then kill every process on a node but its slurmd. Returns
        what was found (jobs and processes): nothing for a test that left the cluster quiet."""
        jobs = self.job_ids()
        if jobs:
            self.run(["scancel", *jobs], check=False)
            wait_until(lambda: not self.job_ids(), timeout_s, 0.25)
        left = self.node_processes()
        for procs in left.values():
            kill_pids([int(proc.split()[0]) for proc in procs])
        if left:
            wait_until(lambda: not self.node_processes(), timeout_s, 0.25)
        return [f"job {job}" for job in jobs] + [f"{node}: {proc}" for node, procs in left.items() for proc in procs]

    def logs(self, tail: int = 3000) -> str:
        """The ends of the daemons' logs, for failure messages."""
        parts = []
        for path in sorted(self.state.glob("*.log")) + sorted(self.state.glob("*.out")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    # -- stop

    def close(self) -> list[str]:
        """Cancel every job, stop the daemons, kill what is left in the namespaces; returns what went wrong."""
        problems = []
        if self._daemons and self._daemons[0].poll() is None and shutil.which("scancel"):
            with contextlib.suppress(Exception):
                left = self.clear(timeout_s=20)
                if left:
                    problems.append(f"still queued, running or alive at the end: {left}")
        for proc in reversed(self._daemons):  # the slurmds, slurmctld, then munged
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self._daemons = []
        return problems


@contextlib.contextmanager
def slurm_cluster(base: Path) -> Iterator[SlurmCluster]:
    """Netns hosts and a Slurm cluster on them, the cluster's files under ``base``; all removed afterwards."""
    with NetnsHosts() as hosts, SlurmCluster(hosts, base / f"slurm-{time.time_ns()}") as cluster:
        yield cluster
