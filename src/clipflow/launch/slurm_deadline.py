"""The launcher's own notice before a Slurm job's time limit (``--slurm-notice S``).

Slurm's warning signal (``sbatch --signal=USR1@S``) alone does not make a reliable chain of allocations: slurmctld
looks at time limits only every 30 s, so it comes up to that much late (or, by Slurm's documentation, up to 60 s
early), and after ``scontrol requeue`` the next allocation of the same job never gets it again (measured on Slurm
22.05: the requeued train job ran into its limit, CANCELLED DUE TO TIME LIMIT, without a notice). So a launcher
running in a Slurm job asks Slurm how long its allocation has left (``squeue --format=%L``) when it starts and gives
the workers the notice itself S seconds before the end, as if it had got SIGUSR1; Slurm's signal, when it comes
first, works as before.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping

from clipflow.errors import ClipflowError
from clipflow.hosts.slurm import SlurmCommandFailed, slurm_command

_LEFT = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)")


def parse_time_left(text: str) -> float | None:
    """Seconds in squeue's ``%L`` (``MM:SS``, ``H:MM:SS``, ``D-HH:MM:SS``); None for no limit (UNLIMITED,
    NOT_SET, INVALID)."""
    text = text.strip()
    match = _LEFT.fullmatch(text)
    if match is None:
        if text.upper() in ("UNLIMITED", "NOT_SET", "INVALID", ""):
            return None
        raise ClipflowError(f"squeue gave the job's time left as {text!r}; expected [D-][H:]MM:SS or UNLIMITED")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def job_time_left(environ: Mapping[str, str] = os.environ) -> float | None:
    """Seconds left to this Slurm job (``SLURM_JOB_ID``) by squeue; None outside a job or without a limit."""
    job_id = environ.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return None
    try:
        out = slurm_command(["squeue", "--noheader", "--jobs", job_id, "--format=%L"], environ)
    except SlurmCommandFailed as failed:
        raise ClipflowError(f"--slurm-notice: cannot ask Slurm for job {job_id}'s time left: {failed}") from None
    return parse_time_left(out)


def notice_deadline(before_s: float, environ: Mapping[str, str] = os.environ) -> float | None:
    """The monotonic time at which to give the notice: ``before_s`` seconds before this job's end (at once when
    less is left); None when ``before_s`` is 0, outside a Slurm job, or without a time limit."""
    if before_s <= 0:
        return None
    left = job_time_left(environ)
    return None if left is None else time.monotonic() + max(left - before_s, 0.0)
