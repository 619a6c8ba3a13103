"""Job files for tests: a checked TrainJob of the tiny recipe on a local plan, without launching it."""

from __future__ import annotations

import json
from pathlib import Path

from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import make_plan
from clipflow.recipe import load_recipe
from clipflow.train.job import TrainJob


def tiny_job_dict(folder: Path, backend: str = "ps", workers: int = 2, port: int = 9099) -> dict:
    """The form of job.json (every key), paths under ``folder``."""
    plan = make_plan("local", [Host("localhost")], workers, 1, port, 10, "none")
    paths = {name: str(folder / name) for name in ("splits", "root", "ckpt", "model.pt", "metrics.jsonl")}
    return {
        "version": 1,
        "plan": plan.to_dict(),
        "recipe": load_recipe("slowfast_tiny_synthetic"),
        "backend": backend,
        "ps": {"mode": "dist_sync", "update_on_kvstore": False, "compression": "none", "threshold": 0.5},
        "paths": {"splits_dir": paths["splits"], "root": paths["root"], "checkpoint_root": paths["ckpt"],
                  "model_out": paths["model.pt"], "metrics_out": paths["metrics.jsonl"], "val_list": None,
                  "tensorboard": None, "train_list": None},
        "seed": 0,
        "policy": {"resume": "auto", "global_batch": "scale", "max_restarts": 0, "min_workers": None, "stop_grace": 60},
    }  # fmt: skip


def write_job_file(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def tiny_job(folder: Path, backend: str = "ps", workers: int = 2) -> TrainJob:
    return TrainJob.from_dict(tiny_job_dict(folder, backend, workers))
