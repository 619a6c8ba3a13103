"""The workflow on the real Slurm cluster of tests/slurm_cluster.py through ``workflow/profiles/slurm``: Snakemake
run with the profile, the jobs the executor plugin submitted for a rule, the sbatch calls it made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurm_helpers import slurm_env

# the executor plugin's settings for this cluster: no accounting storage (squeue, not sacct, with MinJobAge=600
# keeping finished jobs in view) and nodes of 2 CPUs and 1000 MB (the profile's mem_mb and cpus_per_task are a
# real cluster's); its first status check after 2 s, not 40
SLURM_PROFILE_ARGS = (
    "--profile", "workflow/profiles/slurm", "--slurm-status-command", "squeue",
    "--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "5",
    "--default-resources", "mem_mb=100", "cpus_per_task=1", "runtime=30",
    "--set-resources", "train:mem_mb=100", "evaluate:mem_mb=100",
)  # fmt: skip


def snakemake_slurm(slurm, workdir: Path, *args: str, timeout: int = 900,
                    env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """``snakemake --profile workflow/profiles/slurm ARGS`` in ``workdir`` (config tiny.yaml), on ``slurm``; the
    jobs get Snakemake's environment (sbatch exports it), ``env_extra`` included."""
    cmd = [sys.executable, "-m", "snakemake", *args, *SLURM_PROFILE_ARGS, "--configfile", "tiny.yaml"]  # targets first
    env = {**slurm_env(slurm), **(env_extra or {})}
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)


def jobs_of_rule(slurm, rule: str) -> list[dict[str, str]]:
    """``scontrol show job`` of every job the executor plugin submitted for ``rule`` (its comment ``rule_RULE``),
    finished ones included while MinJobAge keeps them."""
    out = slurm.run(["scontrol", "show", "job", "--oneliner"]).stdout
    jobs = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.splitlines() if line.strip()]
    return [job for job in jobs if job.get("Comment") == f"rule_{rule}"]


def sbatch_calls(output: str, rule: str) -> list[str]:
    """The sbatch commands the executor plugin ran for ``rule``, from the output of a ``--verbose`` run."""
    return [line for line in output.splitlines() if "sbatch call:" in line and f"--comment rule_{rule} " in line]
