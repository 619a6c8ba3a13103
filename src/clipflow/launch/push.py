"""The push of a run's files to its hosts (hosts with their own disks, reached over ssh): every file checked
against its sha256 there, a secret readable by its owner only; used by `train launch` and `evaluate launch`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clipflow.checksums import sha256_of
from clipflow.errors import ClipflowError
from clipflow.hosts.files import SftpFiles, open_host
from clipflow.hosts.plan import Plan
from clipflow.hosts.remote_record import check_ours, name_in, read_record, write_record
from clipflow.hosts.transfer import push_checked


def push_job_files(plan: Plan, folder: str, files: Callable[[str], dict[str, Path]], log=print) -> None:
    """On every host of ``plan``, ``files(host)`` (remote path under the run's ``folder`` there -> local file) put
    there, each checked; a secret (a CURVE ``*_secret`` key) readable by its owner only. The folder's record there
    (clipflow.hosts.remote_record) names them first: a file of one of those names there that it does not name is
    refused, never replaced."""
    fix = f"move it away there, or give the run another name (run) or folder (cluster.job_dir) than {folder}"
    digests: dict[Path, str] = {}  # a file every host gets is hashed once
    for host in plan.role_hosts():
        where = open_remote(plan, host)
        try:
            wanted = files(host)
            record = read_record(where, folder, "the run")
            check_ours(where, folder, record, wanted, fix)
            for local in wanted.values():
                if local not in digests:
                    digests[local] = sha256_of(local)
            record.update({name_in(folder, remote): [digests[local]] for remote, local in wanted.items()})
            write_record(where, folder, record)  # before the files: a push cut short leaves only recorded names
            for remote, local in wanted.items():
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
