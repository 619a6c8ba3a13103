"""Step time of the tiny SlowFast with 2 workers on the parameter server, against the same
2 workers with no communication at all (each alone, side by side on the same cores).

Both runs do the same forward and backward on the same random clips; the PS run also
pushes gradient buckets from backward hooks (PSSync) and pulls the sums. The ratio
PS / no-communication is what distribution costs per step here.

    .venv/bin/python bench/overlap.py [--steps 30] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from clipflow.hosts.hostsfile import hosts_from_config
from clipflow.hosts.plan import make_plan
from clipflow.hosts.ports import free_port
from clipflow.launch.roles import ps_environment

WORKERS = 2


def worker(mode: str, steps: int, batch: int) -> None:
    import torch
    from torch.nn import functional as F

    from clipflow.models.builder import build_model
    from clipflow.recipe import load_recipe

    torch.set_num_threads(1)
    torch.manual_seed(0)
    recipe = load_recipe("slowfast_tiny_synthetic")
    model = build_model(recipe["model"])
    d = recipe["data"]
    size, frames = d["input_size"], d["new_length"] // d["fast_temporal_stride"]
    slow = torch.randn(batch, 3, d["new_length"] // d["slow_temporal_stride"], size, size)
    fast = torch.randn(batch, 3, frames, size, size)
    labels = torch.randint(0, recipe["model"]["num_classes"], (batch,))
    optimizer = {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4, "rescale_grad": 1 / WORKERS}
    kv = sync = None
    if mode == "ps":
        from clipflow.ps import KVStore
        from clipflow.train.ps_sync import PSSync

        kv = KVStore.create("dist_sync")
        sync = PSSync(model, kv, optimizer=optimizer)
    else:
        local = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        F.cross_entropy(model(slow, fast), labels).backward()
        if sync is not None:
            sync.synchronize()
            sync.step()
        else:
            local.step()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
    extra = {"pushed_in_backward": sync.pushed_in_backward, "pushed_in_sync": sync.pushed_in_sync} if sync else {}
    print(json.dumps({"step_s": times, **extra}), flush=True)
    if kv is not None:
        kv.close()


def run(mode: str, steps: int, batch: int) -> list[dict]:
    me = [sys.executable, str(Path(__file__).resolve()), "--role", "worker", "--mode", mode,
          "--steps", str(steps), "--batch", str(batch)]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    try:
        if mode == "ps":
            plan = make_plan("local", hosts_from_config(["localhost"]), WORKERS, 1, free_port(), 30)
            for role in [r for r in plan.roles if r.role != "worker"]:  # the scheduler and the server
                procs.append(subprocess.Popen([sys.executable, "-m", "clipflow", "ps", "role"],
                                              env={**env, **ps_environment(plan, role)}))  # fmt: skip
            workers = [subprocess.Popen(me, env={**env, **ps_environment(plan, r)}, stdout=subprocess.PIPE, text=True)
                       for r in plan.roles if r.role == "worker"]  # fmt: skip
        else:
            workers = [subprocess.Popen(me, env=env, stdout=subprocess.PIPE, text=True) for _ in range(WORKERS)]
        procs += workers
        outputs = [w.communicate(timeout=600)[0] for w in workers]
        for p in procs:
            p.wait(timeout=60)
        if any(p.returncode for p in procs):
            raise SystemExit(f"a {mode} process failed: exit codes {[p.returncode for p in procs]}")
        return [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="main", choices=["main", "worker"])
    parser.add_argument("--mode", default="ps", choices=["ps", "local"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=5)
    a = parser.parse_args()
    if a.role == "worker":
        worker(a.mode, a.steps, a.batch)
        return
    figures: dict[str, float] = {}
    for mode in ("local", "ps"):
        results = run(mode, a.steps + a.warmup, a.batch)
        steps = [t for r in results for t in r["step_s"][a.warmup :]]
        figures[f"{mode}_step_ms"] = 1000 * statistics.median(steps)
        if mode == "ps":
            figures["buckets_pushed_in_backward"] = sum(r["pushed_in_backward"] for r in results)
            figures["buckets_pushed_after_backward"] = sum(r["pushed_in_sync"] for r in results)
    figures["ratio_ps_over_local"] = figures["ps_step_ms"] / figures["local_step_ms"]
    print(f"tiny SlowFast, batch {a.batch} per worker, {WORKERS} workers, median of {a.steps} steps")
    print(f"  no communication      {figures['local_step_ms']:8.1f} ms/step")
    print(f"  parameter server      {figures['ps_step_ms']:8.1f} ms/step")
    print(f"  ratio                 {figures['ratio_ps_over_local']:8.3f}")
    print(json.dumps({"bench": "overlap", **figures}))


if __name__ == "__main__":
    main()
