"""rsync of the working directory to ``cluster.sync_dst_dir`` on every host, errors checked.

Results, logs, Snakemake's state, local clipflow state and virtual environments stay
behind (each host has its own environment; the host checks compare its versions).
rsync runs over the OpenSSH client with the job's key and the pinned host keys.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import Plan
from clipflow.hosts.ssh import SshSettings, ssh_options

EXCLUDES = (
    "/results/",
    "/logs/",
    "/.snakemake/",
    "/.clipflow/",
    ".venv/",
    "venv/",
    "__pycache__/",
    "*.egg-info/",
    ".pytest_cache/",
    ".ruff_cache/",
)


def ssh_shell(host: Host, settings: SshSettings) -> str:
    """rsync's ``-e`` remote shell: the OpenSSH client with the job's key and the pinned host keys."""
    return shlex.join(["ssh", *ssh_options(host, settings)])


def rsync_failure(returncode: int, stderr: str, dst: str) -> str:
    """Why an rsync to ``dst`` on a host failed, in words, from its exit status and its stderr."""
    err = stderr.strip()
    if "command not found" in err or returncode == 127:
        return "rsync is not installed there (Debian: apt install rsync)"
    if "No such file or directory" in err and "mkdir" in err:
        return f"the parent folder of {dst} does not exist there"
    if returncode == 255:
        return "ssh failed: " + (err.splitlines() or ["no message"])[-1]
    return (err.splitlines() or [f"exit status {returncode}"])[-1]


def rsync_argv(src: Path, host: Host, dst: str, settings: SshSettings) -> list[str]:
    """rsync -a of ``src``'s contents into ``dst`` on ``host`` (dst's parent must exist there)."""
    shell = ssh_shell(host, settings)
    excludes = [f"--exclude={pattern}" for pattern in EXCLUDES]
    target = f"{host.target}:{dst.rstrip('/')}/"
    return ["rsync", "-a", "--protect-args", *excludes, "-e", shell, f"{str(src).rstrip('/')}/", target]


def sync_host(src: Path, host: Host, dst: str, settings: SshSettings, timeout_s: float = 600) -> None:
    """Copy the working directory to one host; ClipflowError naming the host and the cause on failure."""
    if not dst or not dst.startswith(("/", "~")):
        raise ClipflowError(f"cluster.sync_dst_dir must be an absolute path (or start with ~/), got {dst!r}")
    if dst.startswith("~/"):
        dst = dst[2:]  # rsync paths are relative to the remote home
    argv = rsync_argv(src, host, dst, settings)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise ClipflowError("rsync is not installed on the launching node (Debian: apt install rsync)") from None
    except subprocess.TimeoutExpired:
        raise ClipflowError(f"{host}: rsync to {dst} did not finish within {timeout_s:g} s") from None
    if done.returncode == 0:
        return
    why = rsync_failure(done.returncode, done.stderr, dst)
    if why.startswith("the parent folder"):
        why += "; create it or change cluster.sync_dst_dir"
    raise ClipflowError(f"{host}: rsync of {src} to {dst} failed (exit {done.returncode}): {why}")


def sync_plan(plan: Plan, src: str | Path, dst: str, stamp: str | Path = "", log=print) -> None:
    """``src`` synced to ``dst`` on every host of ``plan``; ``stamp`` (the hosts, a line each) written after."""
    settings = plan.ssh_settings()
    for host in plan.host_list():
        sync_host(Path(src).absolute(), host, dst, settings)
        log(f"clipflow cluster: {host}: {src} synced to {dst}")
    if stamp:
        write_text_atomic(stamp, "\n".join(plan.hosts) + "\n")
