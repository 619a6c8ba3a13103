"""The benchmarks still run: each on tiny sizes, ending with its JSON line of figures.

No timing is asserted (benchmarks measure, tests do not); this catches a benchmark
broken by a change in the package it drives.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO, python_env


def last_json(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ps_throughput_runs_every_job() -> None:
    figures = last_json("bench/ps_throughput.py", "--numel", "200000", "--iters", "1", "--warmup", "0", "--repeat", "1")
    jobs = ["gloo_allreduce", "raw_zmq_roundtrip", "clipflow_tcp_1server", "clipflow_2hosts_2servers"]
    assert all(figures[f"{job}_ms"] > 0 for job in jobs), figures
    assert "ratio_clipflow_1host_shm_vs_gloo" in figures


def test_overlap_runs_both_modes() -> None:
    figures = last_json("bench/overlap.py", "--steps", "1", "--warmup", "0", "--batch", "2")
    assert figures["bench"] == "overlap" and figures["local_step_ms"] > 0 and figures["ps_step_ms"] > 0
    assert figures["buckets_pushed_in_backward"] > 0


def test_loader_bench_runs_every_figure() -> None:
    figures = last_json("bench/loader.py", "--quick")
    assert figures["bench"] == "loader"
    for run in ("before", "after"):
        assert figures[f"{run}_loader_clips_per_s"] > 0 and figures[f"{run}_limit_clips_per_s"] > 0, figures
        assert figures[f"{run}_ratio"] > 0 and figures[f"{run}_limit_frames_per_clip"] >= 1
    assert figures["after_keyframe_distance"] == 16 and figures["after_workers2_loader_clips_per_s"] > 0
    for process in ("after_rss_main", "after_workers2_rss_worker0", "after_workers2_rss_worker1"):
        assert figures[f"{process}_last_mib"] > 0 and f"{process}_slope_mib_per_1000" in figures, figures
    assert figures["decord_readers_rss_last_mib"] > 0


def test_train_step_bench_runs_every_variant() -> None:
    figures = last_json("bench/train_step.py", "--quick")
    assert figures["bench"] == "train_step" and figures["fp32_ratio"] == 1.0
    for name in ("fp32", "channels_last", "bf16", "bf16_channels_last"):
        assert figures[f"{name}_clips_per_s"] > 0 and figures[f"{name}_ratio"] > 0, figures
