"""Training jobs on the real Slurm cluster of tests/slurm_cluster.py: a batch script that plans the roles on the
allocation's nodes and runs `clipflow train launch --launcher slurm` (tiny recipe), submitted with sbatch."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from helpers import free_port, python_env
from launch_helpers import TINY, scanned

from clipflow.data.listfile import write_list


def three_splits(tmp_path: Path, tiny_videos: Path, per_worker: int = 4) -> Path:
    """worker0..2.lst of ``per_worker`` scanned videos each; their folder."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    for rank in range(3):
        write_list(splits / f"worker{rank}.lst", entries[rank * per_worker : (rank + 1) * per_worker])
    return splits


def train_script(tmp_path: Path, tiny_videos: Path, splits: Path, *extra: str, overrides=None, workers: int = 3,
                 servers: int = 3, plan_args: tuple[str, ...] = (), make_plan: bool = True) -> Path:  # fmt: skip
    """A batch script: `clipflow cluster plan --launcher slurm` on the allocation (``plan_args`` added; none with
    ``make_plan`` false: the test made plan.json), then `clipflow train launch`."""
    python = shlex.quote(sys.executable)
    plan = tmp_path / "plan.json"
    launch = [
        "-m", "clipflow", "train", "launch", "--plan", str(plan), "--log-dir", str(tmp_path / "logs"),
        "--recipe", "slowfast_tiny_synthetic", "--overrides", json.dumps(overrides or TINY),
        "--splits-dir", str(splits), "--root", str(tiny_videos), "--checkpoint-root", str(tmp_path / "ckpt"),
        "--model-out", str(tmp_path / "model.pt"), "--metrics-out", str(tmp_path / "metrics.jsonl"), "--grace", "5",
        *extra,
    ]  # fmt: skip
    script = tmp_path / "train.sbatch"
    planning = (
        f"{python} -m clipflow cluster plan --launcher slurm --num-workers {workers} --num-servers {servers} "
        f"--root-port {free_port()} --heartbeat-timeout 10 {' '.join(map(shlex.quote, plan_args))} "
        f"--out {shlex.quote(str(plan))} || exit $?\n"
    )
    script.write_text(
        f"#!/bin/sh\ncd {shlex.quote(str(tmp_path))}\n{planning if make_plan else ''}"
        f"exec {python} {' '.join(shlex.quote(a) for a in launch)}\n"
    )
    return script


def slurm_env(slurm) -> dict[str, str]:
    """:func:`python_env` with the cluster's ``SLURM_CONF``: the clients here and, through ``--export=ALL``, the
    jobs find this cluster."""
    return {**python_env(), **{k: v for k, v in slurm.env.items() if k.startswith("SLURM_")}}


def sbatch(slurm, script: Path, *options: str) -> str:
    """Submit ``script`` (its output in job.out beside it) on 3 nodes; the job's id."""
    out = script.parent / "job.out"
    argv = ["sbatch", "--parsable", "--nodes=3", "--ntasks-per-node=1", f"--output={out}", *options, str(script)]
    env = slurm_env(slurm)
    env["CLIPFLOW_HEARTBEAT_TIMEOUT"] = "10"
    return slurm.run(argv, env=env).stdout.strip().split(";")[0]


def role_pid(slurm, node_index: int, role: str, rank: int, job: str | None = None) -> int | None:
    """The pid of a role's own process on a node (found by its environment, as srun's task; of Slurm job ``job``
    when given), or None."""
    for pid in slurm.hosts.pids(node_index):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        tether = b"prctl" in cmdline  # the launcher's wrapper (clipflow.launch.tether) before it execs srun
        if b"clipflow" not in cmdline or cmdline.startswith(b"srun") or b"slurmstepd" in cmdline or tether:
            continue
        if job is not None and f"SLURM_JOB_ID={job}".encode() not in environ:
            continue
        if f"DMLC_ROLE={role}".encode() in environ and f"DMLC_RANK={rank}".encode() in environ:
            return pid
    return None


def training_started(out: Path) -> bool:
    """The job's output shows a training step done (rank 0's progress line of its first epoch)."""
    return out.exists() and "1/" in out.read_text() and "it/s" in out.read_text()


def refusal_in(out: str, *names: str) -> str:
    """The job's output holds one `clipflow: error:` line naming every one of ``names``, and no traceback."""
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("clipflow: error: ")]
    assert len(errors) == 1, out
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]
