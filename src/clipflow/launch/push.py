"""The push of a run's files to its hosts (hosts with their own disks, reached over ssh): every file checked
against its sha256 there, a secret readable by its owner only; used by `train launch` and `evaluate launch`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.hosts.files import SftpFiles, open_host
from clipflow.hosts.plan import Plan
from clipflow.hosts.transfer import push_checked


def push_job_files(plan: Plan, files: Callable[[str], dict[str, Path]], log=print) -> None:
    """On every host of ``plan``, ``files(host)`` (remote path -> local file) put there, each checked; a secret
    (a CURVE ``*_secret`` key) readable by its owner only."""
    for host in plan.role_hosts():
        where = open_remote(plan, host)
        try:
            for remote, local in files(host).items():
                try:
                    push_checked(where, local, remote)
                    if remote.endswith("_secret"):
                        where.chmod(remote, 0o600)
                except OSError as exc:
                    raise ClipflowError(f"{host}: cannot write {remote} there ({exc.strerror or exc})") from None
        finally:
            where.close()
        log(f"clipflow: {host}: the job's files are there")


def key_files(plan: Plan, folder: str) -> dict[str, Path]:
    """The job's CURVE keys (remote path -> file here) for the run's ``folder`` on a host, when it has keys."""
    if not plan.keys_dir:
        return {}
    return {f"{folder}/{path.name}": path for path in sorted(Path(plan.keys_dir).iterdir()) if path.is_file()}


def open_remote(plan: Plan, host: str) -> SftpFiles:
    where = open_host(plan, host)
    if not isinstance(where, SftpFiles):
        where.close()
        raise ClipflowError("storage local is for hosts with their own disks, reached over ssh (cluster.launcher ssh)")
    return where
