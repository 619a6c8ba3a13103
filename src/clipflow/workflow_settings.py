"""The settings a trained model depends on, one line each, for the workflow's train rule.

Snakemake reruns a job when one of its params changed, but it never looks at the params of a job below
one it already reruns through an ``ancient()`` input (the cluster's plan, which train reads that way so
that a host change alone does not retrain). The workflow therefore writes these settings into a file of
their own (rule ``train_settings``, no inputs, so Snakemake always judges it) that train reads as a plain
input: a changed setting reruns that rule, and through it train and what follows, and the dry run's reason
names the setting with its old and new value.
"""

from __future__ import annotations

import json
from typing import Any

from clipflow.files import write_text_atomic

# the cluster settings that change what training computes; the rest (hosts, placement, ports, ssh, storage,
# timeouts) only say where it runs
CLUSTER_KEYS = ("num_workers", "num_servers")


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` under ``prefix`` as ``{"prefix.a.b": 1}``; lists and scalars stay whole."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key in sorted(value):
        flat.update(flatten(f"{prefix}.{key}" if prefix else str(key), value[key]))
    return flat


def train_settings(config: dict, recipe: dict) -> dict[str, str]:
    """Setting name -> ``name=value`` (the value as JSON): the whole recipe after the overrides (``recipe
    train.epochs=2``), the config's ``train`` section and the worker and server counts."""
    settings = {f"recipe {name}": value for name, value in flatten("", recipe).items()}
    settings.update(flatten("train", config["train"]))
    settings.update({f"cluster.{key}": config["cluster"][key] for key in CLUSTER_KEYS})
    return {name: f"{name}={json.dumps(value, sort_keys=True)}" for name, value in settings.items()}


def write_settings(path: str, lines: list[str], log: str) -> None:
    """The train_settings rule's output: one ``name=value`` line each, and a line of log saying how many."""
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))
    write_text_atomic(log, f"{len(lines)} settings the trained model depends on: {path}\n")
