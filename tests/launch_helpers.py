"""`clipflow train launch` as the training tests run it: the tiny recipe's overrides (TINY), a plan and a launch on
this machine (launch), and worker lists of the tiny synthetic set's scanned videos (scanned, scanned_val,
two_splits)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import clipflow_here, free_port, python_env

from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.data.scan import scan

TINY = {  # loader_workers 0: no sizing and no loader processes at each of the suite's launches (test_launch's
    # first test trains with the default, auto)
    "train": {"epochs": 1, "batch_size": 2, "warmup_epochs": 0, "loader_workers": 0},
    "data": {"new_length": 8, "new_width": 42, "new_height": 32, "input_size": 32},
}


def launch(tmp_path, tiny_videos, splits_dir, *extra: str, overrides=None, env_extra=None, security="auto",
           recipe="slowfast_tiny_synthetic", plan_args=(), here=None):  # fmt: skip
    """The launch, as a process of its own; with ``here`` (pytest's capsys) in this one, for a launch refused
    before anything starts (``env_extra`` is then not set)."""
    argv, env = launch_command(tmp_path, tiny_videos, splits_dir, *extra, overrides=overrides, env_extra=env_extra,
                               security=security, recipe=recipe, plan_args=plan_args)  # fmt: skip
    if here is not None:
        return clipflow_here(here, *argv[3:])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def launch_command(tmp_path, tiny_videos, splits_dir, *extra: str, overrides=None, env_extra=None, security="auto",
                   recipe="slowfast_tiny_synthetic", plan_args=()) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The command line and environment of :func:`launch` (after making its plan), to start it with Popen."""
    plan = tmp_path / "plan.json"
    env = {**python_env(), "CLIPFLOW_HEARTBEAT_TIMEOUT": "10", **(env_extra or {})}
    made = subprocess.run(
        [sys.executable, "-m", "clipflow", "cluster", "plan", "--root-port", str(free_port()),
         "--heartbeat-timeout", "10", "--security", security, *plan_args, "--out", str(plan)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return (
        [sys.executable, "-m", "clipflow", "train", "launch", "--plan", str(plan), "--log-dir", str(tmp_path / "logs"),
         "--recipe", recipe, "--overrides", json.dumps(overrides or TINY),
         "--splits-dir", str(splits_dir),
         "--root", str(tiny_videos), "--checkpoint-root", str(tmp_path / "ckpt"),
         "--model-out", str(tmp_path / "model.pt"), "--metrics-out", str(tmp_path / "metrics.jsonl"), "--grace", "5",
         *extra],
        env,
    )  # fmt: skip


def scanned(tiny_videos) -> list[VideoEntry]:
    results = scan(read_list(tiny_videos / "train_labels.txt"), tiny_videos, workers=2)
    return [VideoEntry(r.path, r.label, r.num_frames) for r in results]


def scanned_val(folder, tiny_videos):
    """``folder``/val.lst: the tiny set's val videos, scanned; its path."""
    val = [VideoEntry(r.path, r.label, r.num_frames)
           for r in scan(read_list(tiny_videos / "val_labels.txt"), tiny_videos, workers=2)]  # fmt: skip
    write_list(folder / "val.lst", val)
    return folder / "val.lst"


def two_splits(tmp_path, tiny_videos, per_worker: int = 4):
    """worker0.lst and worker1.lst of ``per_worker`` scanned videos each; their folder."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    write_list(splits / "worker0.lst", entries[:per_worker])
    write_list(splits / "worker1.lst", entries[per_worker : 2 * per_worker])
    return splits
