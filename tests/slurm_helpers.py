"""Training jobs on the real Slurm cluster of tests/slurm_cluster.py: a batch script that plans the roles on the
allocation's nodes and runs `clipflow train launch --launcher slurm` (tiny recipe), submitted with sbatch."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from helpers import python_env
from launch_helpers import TINY, scanned

from clipflow.cluster.ports import free_port
from clipflow.data.listfile import write_list


def three_splits(tmp_path: Path, tiny_videos: Path, per_worker: int = 4) -> Path:
    """worker0..2.lst of ``per_worker`` scanned videos each; their folder."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    for rank in range(3):
        write_list(splits / f"worker{rank}.lst", entries[rank * per_worker : (rank + 1) * per_worker])
    return splits


def train_script(tmp_path: Path, tiny_videos: Path, splits: Path, *extra: str, overrides=None, workers: int = 3,
                 servers: int = 3) -> Path:  # fmt: skip
    """A batch script: `clipflow cluster plan --launcher slurm` on the allocation, then `clipflow train launch`."""
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
    script.write_text(
        "#!/bin/sh\n"
        f"cd {shlex.quote(str(tmp_path))}\n"
        f"{python} -m clipflow cluster plan --launcher slurm --num-workers {workers} --num-servers {servers} "
        f"--root-port {free_port()} --heartbeat-timeout 10 --out {shlex.quote(str(plan))} || exit $?\n"
        f"exec {python} {' '.join(shlex.quote(a) for a in launch)}\n"
    )
    return script


def sbatch(slurm, script: Path, *options: str) -> str:
    """Submit ``script`` (its output in job.out beside it) on 3 nodes; the job's id."""
    out = script.parent / "job.out"
    argv = ["sbatch", "--parsable", "--nodes=3", "--ntasks-per-node=1", f"--output={out}", *options, str(script)]
    env = {**python_env(), **{k: v for k, v in slurm.env.items() if k.startswith("SLURM_")}}
    env["CLIPFLOW_HEARTBEAT_TIMEOUT"] = "10"
    return slurm.run(argv, env=env).stdout.strip().split(";")[0]
