"""`clipflow train launch` with per-host aggregation: 2 hosts x 2 workers (dist_sync_device) end with the weights
of 4 workers pushing each their own gradients (dist_sync). The two "hosts" are loopback addresses: the plan's
workers 2 and 3 (and server 1) advertise 127.0.0.2."""

from __future__ import annotations

import json
import subprocess

import torch
from helpers import assert_refused
from launch_helpers import TINY, launch, launch_command, scanned

from clipflow.data.listfile import write_list


def _four_splits(tmp_path, tiny_videos):
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    for rank in range(4):
        write_list(splits / f"worker{rank}.lst", entries[2 * rank : 2 * rank + 2])
    return splits


def _two_hosts(plan_path) -> None:
    """The plan's second half of the workers, and its second server, on the second loopback "host"."""
    plan = json.loads(plan_path.read_text())
    for role in plan["roles"]:
        if (role["role"], role["rank"]) in (("worker", 2), ("worker", 3), ("server", 1)):
            role["address"] = "127.0.0.2"
    plan_path.write_text(json.dumps(plan))


def _train(run, tiny_videos, splits, kvstore: str):
    """A launch whose plan (made first) puts two workers on each loopback "host"; its output and final weights."""
    argv, env = launch_command(run, tiny_videos, splits, "--kvstore", kvstore, overrides=TINY,
                               plan_args=("--num-workers", "4", "--num-servers", "2"))  # fmt: skip
    _two_hosts(run / "plan.json")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, torch.load(run / "model.pt", weights_only=False)["model"]


def test_two_hosts_of_two_workers_end_with_the_weights_of_four_plain_workers(tmp_path, tiny_videos):
    splits = _four_splits(tmp_path, tiny_videos)
    grouped, a = _train(tmp_path / "device", tiny_videos, splits, "dist_sync_device")
    plain, b = _train(tmp_path / "plain", tiny_videos, splits, "dist_sync")
    assert "per-host aggregation, this worker pushes for host group [2, 3]" in grouped.stdout + grouped.stderr
    assert "per-host aggregation" not in plain.stdout + plain.stderr
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_compression_with_per_host_aggregation_is_refused_before_anything_starts(tmp_path, tiny_videos):
    splits = _four_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, "--kvstore", "dist_sync_device", "--compression", "2bit")
    assert_refused(done, "--compression 2bit", "--kvstore dist_sync_device", status=2)
    assert not (tmp_path / "logs").exists()
