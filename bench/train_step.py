"""Clips/s of a SlowFast training step: clipflow's step options against plain fp32 eager, in one run.

The step is the trainer's (clipflow.train.step.StepOptions: forward, then cross-entropy
in float32, backward, an SGD step with momentum 0.9), on random clips of the model's
published input: SlowFast 4x16 R50 takes 4 slow and 32 fast frames of 224 x 224, at
``--batch`` 2. Variants, each after ``--warmup`` steps, ``--steps`` timed steps:

* ``fp32`` eager, the baseline;
* ``channels_last`` (channels_last_3d model and clips);
* ``bf16`` (bfloat16 autocast, BatchNorm and loss in float32);
* ``bf16 + channels_last``;
* with ``--compile``, the last one compiled with torch.compile (its compilation is in
  the warm-up, not in the timing).

On CPU, torch uses ``--threads`` threads (default: all cores). On a CUDA device
(``--device cuda``) every step ends with a synchronize before the clock reads.

    .venv/bin/python bench/train_step.py [--model slowfast_4x16_resnet50] [--batch 2] [--steps 3]
    .venv/bin/python bench/train_step.py --quick    # the tiny model at 32 x 32, for the test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from clipflow.models.builder import build_model
from clipflow.models.cards import CARDS
from clipflow.models.step import StepOptions
from clipflow.recipe import load_recipe


def variants(compile_too: bool) -> dict[str, StepOptions]:
    out = {
        "fp32": StepOptions(),
        "channels_last": StepOptions(channels_last=True),
        "bf16": StepOptions(precision="bf16"),
        "bf16_channels_last": StepOptions(precision="bf16", channels_last=True),
    }
    if compile_too:
        out["bf16_channels_last_compiled"] = StepOptions(precision="bf16", channels_last=True, compile=True)
    return out


def time_steps(settings: dict, options: StepOptions, a: argparse.Namespace, device: torch.device) -> float:
    """Seconds per step over ``a.steps`` steps after ``a.warmup``, for a fresh model with these options."""
    torch.manual_seed(0)
    model = build_model(settings).to(device).train()
    forward = options.prepare(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    slow_t, fast_t = a.frames
    slow = torch.randn(a.batch, 3, slow_t, a.size, a.size, device=device)
    fast = torch.randn(a.batch, 3, fast_t, a.size, a.size, device=device)
    labels = torch.randint(0, settings["num_classes"], (a.batch,), device=device)

    def step() -> None:
        loss = F.cross_entropy(options.logits(forward, slow, fast), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    began = time.perf_counter()
    for _ in range(a.steps):
        step()
    return (time.perf_counter() - began) / a.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="slowfast_4x16_resnet50")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="also the compiled bf16 + channels_last step")
    parser.add_argument("--quick", action="store_true", help="the tiny recipe's model at 32 x 32, one step")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    if a.quick:
        settings = load_recipe("slowfast_tiny_synthetic")["model"]
        a.frames, a.size, a.steps, a.warmup = (4, 16), 32, 1, 1
    else:
        settings = {"name": a.model, "num_classes": 400}
        card = CARDS[a.model]
        a.frames = card.frames if len(card.frames) == 2 else (card.frames[0], card.frames[0])
        a.size = card.size
    device = torch.device(a.device)
    figures: dict = {"bench": "train_step", "model": settings["name"], "batch": a.batch, "device": str(device),
                     "threads": a.threads, "frames": list(a.frames), "size": a.size, "steps": a.steps}  # fmt: skip
    for name, options in variants(a.compile).items():
        seconds = time_steps(settings, options, a, device)
        figures[f"{name}_step_s"] = seconds
        figures[f"{name}_clips_per_s"] = a.batch / seconds
    base = figures["fp32_clips_per_s"]
    print(f"{settings['name']} training step, batch {a.batch}, {a.frames[0]} + {a.frames[1]} frames of "
          f"{a.size} x {a.size}, on {device} ({a.threads} threads), {a.steps} steps after {a.warmup}")  # fmt: skip
    print(f"  {'variant':30s} {'s/step':>8s} {'clips/s':>8s} {'vs fp32 eager':>14s}")
    for name in variants(a.compile):
        cps = figures[f"{name}_clips_per_s"]
        figures[f"{name}_ratio"] = cps / base
        print(f"  {name:30s} {figures[f'{name}_step_s']:8.2f} {cps:8.3f} {cps / base:14.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
