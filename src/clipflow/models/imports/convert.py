"""A reference's tensors -> clipflow's state dict, every name and shape checked (see clipflow.models.imports).

:func:`convert` maps each of the source's tensors through its module's ``rename`` (and ``adapt``), builds clipflow's
network with the number of classes the source's classifier has, and refuses, naming the file and the tensor:

- a name that maps to no tensor of clipflow's network, or two names that map to one;
- a shape that does not fit (both shapes named);
- a tensor of clipflow's network the file leaves unfilled (the first few named, and how many in all).

BatchNorm's ``num_batches_tracked`` is a counter, not a weight: 0, as a network just built has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model

COUNTER = "num_batches_tracked"
SHOWN = 5


@dataclass(frozen=True)
class Converted:
    """The state dict of clipflow's ``model`` (with ``num_classes``), the source name of each of its tensors, and the
    source's tensors that have no place in it (name -> shape)."""

    model: str
    num_classes: int
    state: dict[str, torch.Tensor]
    name_map: dict[str, str]  # clipflow key -> the source's name
    skipped: dict[str, list[int]]


def classifier_key(model: str) -> str:
    """The state-dict key of the weight of ``model``'s last linear layer (its classifier)."""
    with torch.device("meta"):
        net = build_model({"name": model, "num_classes": 1})
    linear = [name for name, m in net.named_modules() if isinstance(m, torch.nn.Linear)]
    return f"{linear[-1]}.weight"


def convert(tensors: dict[str, np.ndarray], module: ModuleType, model: str, path: Path) -> Converted:
    """``tensors`` (the source's, by its names, from ``path``) as the state dict of clipflow's ``model``."""
    adapt = getattr(module, "adapt", lambda key, array: array)
    mapped: dict[str, np.ndarray] = {}
    name_map: dict[str, str] = {}
    skipped: dict[str, list[int]] = {}
    for name, array in tensors.items():
        try:
            key = module.rename(name, model)
        except ClipflowError as exc:  # a name the reference's network does not have: the file named too
            raise ClipflowError(f"{path}: {exc}") from None
        if key is None:
            skipped[name] = list(array.shape)
            continue
        if key in mapped:
            raise ClipflowError(f"{path}: tensors {name_map[key]} and {name} both map to {key} of {model}; is it a "
                                f"checkpoint of {model}?")  # fmt: skip
        mapped[key], name_map[key] = adapt(key, np.asarray(array)), name
    head = classifier_key(model)
    if head not in mapped:
        raise ClipflowError(f"{path} has no classifier ({head} of {model}); is it a checkpoint of {model}?")
    num_classes = int(mapped[head].shape[0])
    with torch.device("meta"):  # its names, shapes and dtypes: no weights drawn that the file's replace
        target = build_model({"name": model, "num_classes": num_classes}).state_dict()
    state: dict[str, torch.Tensor] = {}
    for key, array in mapped.items():
        if key not in target:
            raise ClipflowError(f"{path}: tensor {name_map[key]} maps to {key}, which {model} does not have; is it a "
                                f"checkpoint of {model}?")  # fmt: skip
        want = list(target[key].shape)
        if list(array.shape) != want:
            raise ClipflowError(f"{path}: tensor {name_map[key]} has shape {list(array.shape)}, but {key} of {model} "
                                f"has {want}; is it a checkpoint of {model}?")  # fmt: skip
        state[key] = torch.from_numpy(np.ascontiguousarray(array)).to(target[key].dtype)
    unfilled = [key for key in target if key not in state and not key.endswith(COUNTER)]
    if unfilled:
        raise ClipflowError(
            f"{path} leaves {len(unfilled)} tensors of {model} unfilled ({', '.join(unfilled[:SHOWN])}"
            f"{', ...' if len(unfilled) > SHOWN else ''}); is it a checkpoint of {model}?"
        )
    state.update({key: torch.zeros((), dtype=target[key].dtype) for key in target if key.endswith(COUNTER)})
    return Converted(model, num_classes, {key: state[key] for key in target}, name_map, skipped)


def provenance(converted: Converted, source: str, path: Path, sha256: str, reference: str) -> dict[str, Any]:
    """What an imported file records of where it came from."""
    return {"source": source, "file": str(path), "sha256": sha256, "reference_model": reference,
            "name_map": converted.name_map, "skipped": converted.skipped}  # fmt: skip
