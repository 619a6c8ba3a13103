"""`train.init_from`: a run that starts from scratch starts from these weights instead (fine-tuning).

The file is a clipflow model file or checkpoint, or one `clipflow models import` made from published weights
(clipflow.models.weights). It is checked where the job is made (:func:`check_init_from`: it loads with weights only
and its architecture is the recipe's, else the setting that differs is named), and read again by rank 0 of a run
that has no checkpoint to resume (:func:`start_from`), whose weights every worker then takes as usual. A run that
resumes goes on from its checkpoint: the weights it started from are in that checkpoint already.

Every tensor of the network whose name and shape the file has is loaded; the others keep their fresh
initialisation (the classifier, when the number of classes differs); the file's tensors the network has no place
for are named. What was loaded and what was not is printed and kept in the run's run.json.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from clipflow.models.weights import Weights, check_fits, read_weights

KEY = "train.init_from"


def check_init_from(recipe: dict) -> Weights | None:
    """The recipe's ``train.init_from`` read and checked against its model section; None when it names no file."""
    path = recipe["train"].get("init_from") or ""
    if not path:
        return None
    weights = read_weights(Path(path).expanduser(), KEY)  # a host's own copy is named from ~ (train.launch)
    check_fits(weights, recipe["model"], KEY)
    return weights


def start_from(model: torch.nn.Module, recipe: dict, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Loads the recipe's ``train.init_from`` into ``model`` (as built: its fresh tensors stay where the file has
    none that fits); returns what run.json keeps of it."""
    weights = check_init_from(recipe)
    assert weights is not None, "start_from without train.init_from"
    own = model.state_dict()
    loaded = [key for key, tensor in own.items()
              if key in weights.state and tuple(weights.state[key].shape) == tuple(tensor.shape)]  # fmt: skip
    taken = set(loaded)
    fresh = [key for key in own if key not in taken]
    unused = sorted(key for key in weights.state if key not in own)
    model.load_state_dict({**own, **{key: weights.state[key] for key in loaded}})
    log(f"{KEY}: {len(loaded)} of {len(own)} tensors loaded from {weights.path} ({weights.origin}, sha256 "
        f"{weights.sha256[:12]}...)")  # fmt: skip
    if fresh:
        log(f"{KEY}: initialised afresh (not in the file, or another shape there): {', '.join(fresh)}")
    if unused:
        log(f"{KEY}: in the file but not in this network: {', '.join(unused)}")
    return {"file": str(weights.path), "sha256": weights.sha256, "origin": weights.origin, "loaded": loaded,
            "initialised": fresh, "unused": unused}  # fmt: skip
