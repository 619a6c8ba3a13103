"""One training step of a recipe's model, timed on this node: the compute a worker spends on a step (a forward and
backward pass at the per-worker batch) on random clips of the recipe's shape. The link check's step prediction
(clipflow.cluster.prediction) and the loader's sizing (clipflow.train.loader_sizing) both read it; also the
gradient's bytes a step exchanges.

The clips' shape is GluonCV's sampling with one segment (the fast pathway every ``fast_temporal_stride``-th frame of
``new_length``, the slow one every ``slow_temporal_stride``-th), an approximation where a recipe samples otherwise.
The pass runs as the trainer's does (clipflow.models.step): the recipe's ``precision`` (bf16 autocast) and
``channels_last``; not its ``compile``, whose first pass compiles for longer than a timing may last (a compiled step
is faster: the loader is then sized for a slower step than it feeds).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

TIMED_STEPS = 2  # after one untimed step (allocations); the median is kept
UNKNOWN_CLASSES = 400  # the head a recipe that takes its classes from the data is timed with (Kinetics-400's)


def _model(recipe: dict):
    """The recipe's model as training builds it; a recipe that leaves num_classes to the data (known only after the
    scan) with :data:`UNKNOWN_CLASSES` classes: the head is a small share of a video model's bytes and time."""
    from clipflow.models.builder import build_model

    return build_model({"num_classes": UNKNOWN_CLASSES, **recipe["model"]})


def gradient_bytes(recipe: dict) -> int:
    model = _model(recipe)
    return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def clip_shapes(recipe: dict, batch: int) -> list[tuple[int, ...]]:
    """The inputs of one step: images, one video pathway, or SlowFast's slow and fast (see the docstring)."""
    from clipflow.models.slowfast_spec import slowfast_alpha

    data = recipe["data"]
    size = data["input_size"]
    if data["kind"] != "video":
        return [(batch, 3, size, size)]
    fast = max(1, data["new_length"] // data["fast_temporal_stride"])
    if slowfast_alpha(recipe["model"]) is None:
        return [(batch, 3, fast, size, size)]
    slow = max(1, data["new_length"] // data["slow_temporal_stride"])
    return [(batch, 3, slow, size, size), (batch, 3, fast, size, size)]


def time_step(recipe: dict, bound_s: float = 30.0) -> float:
    """Seconds of one forward and backward pass at the recipe's per-worker batch on this node (CPU, or the first
    GPU when there is one): one untimed pass, then up to :data:`TIMED_STEPS` while ``bound_s`` lasts."""
    import torch

    from clipflow.models.cards import is_image_model
    from clipflow.models.step import StepOptions

    device = "cuda" if torch.cuda.is_available() else "cpu"
    options = replace(StepOptions.from_recipe(recipe), compile=False)
    model = options.layout(_model(recipe).to(device).train(), is_image_model(recipe["model"]["name"]))
    inputs = [torch.randn(shape, device=device) for shape in clip_shapes(recipe, recipe["train"]["batch_size"])]
    labels = torch.zeros(recipe["train"]["batch_size"], dtype=torch.long, device=device)
    times: list[float] = []
    began = time.perf_counter()
    for _ in range(TIMED_STEPS + 1):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(options.logits(model, *inputs), labels)
        loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        if time.perf_counter() - began > bound_s:
            break
    return statistics.median(times[1:] or times)
