"""The partition the config names for the Slurm jobs, checked against the cluster's own list (``sinfo``) while
the workflow is read, before any job is submitted."""

from __future__ import annotations

import shutil
import subprocess

from clipflow.errors import ClipflowError


def partitions() -> list[str]:
    """The partitions of the Slurm cluster this machine's ``sinfo`` reaches (its default one marked ``*``)."""
    if shutil.which("sinfo") is None:
        raise ClipflowError(
            "config: cluster.slurm.partition is set but sinfo, Slurm's command, is not found on PATH: run the "
            "workflow where Slurm's commands are (a login node), or leave the partition empty"
        )
    done = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ClipflowError(f"config: cluster.slurm.partition: sinfo failed ({done.returncode}): {reason}")
    return sorted(set(done.stdout.split()))


def check_partition(name: str) -> None:
    """``name`` (``cluster.slurm.partition``) is a partition of this cluster; empty is the cluster's default."""
    if not name:
        return
    known = partitions()
    if name not in (p.rstrip("*") for p in known):
        raise ClipflowError(
            f"config: cluster.slurm.partition {name!r} is not a partition of this Slurm cluster, which has "
            f"{', '.join(known) or 'none'} (sinfo; * the default); set one of them, or leave it empty for the default"
        )
