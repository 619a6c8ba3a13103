"""Weights files: what `train.init_from` and `evaluate --weights` start from.

Two kinds are read, both loaded with weights only (clipflow.safe_load: nothing in them runs):

- a clipflow model file or checkpoint (the train stage's ``model_final.pt``, ``best.pt``, ``epoch_NNNN.pt``): its
  state dict under ``model``, the recipe it was trained with under ``recipe``;
- an imported file (``clipflow models import``, clipflow.models.imports): the state dict under ``model``, the model
  section it fits under ``model_settings`` (``name``, ``num_classes``), and under ``provenance`` where it came from
  (the reference, its file and sha256, the name of every tensor as the reference wrote it, what was skipped).

:func:`read_weights` returns either as :class:`Weights`; :func:`check_fits` compares its model with a recipe's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clipflow.checksums import damage, sha256_of
from clipflow.errors import ClipflowError

# The settings that decide the architecture besides the classes: a weights file of other values does not fit.
FREE = {"num_classes", "classes", "dropout"}  # a fine-tune may change these


@dataclass(frozen=True)
class Weights:
    """A weights file read: its state dict, the model section it was made for, and where it came from."""

    path: Path
    sha256: str
    state: dict[str, Any]
    model: dict[str, Any]  # the model section (name, num_classes, the architecture's settings)
    provenance: dict[str, Any] = field(default_factory=dict)  # an imported file's; {} for clipflow's own

    @property
    def origin(self) -> str:
        """In words: an imported file's reference and file, or "a clipflow model"."""
        p = self.provenance
        return f"{p['source']} {p['file']}" if p else "a clipflow model"


def read_weights(path: str | Path, what: str = "weights file") -> Weights:
    """The weights ``path`` holds; ClipflowError naming ``what`` and the file when it is missing, damaged (its
    ``.sha256`` records other bytes), wants more than weights, or holds no state dict and model section."""
    from clipflow.safe_load import load_weights_only

    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"{what} {path} does not exist; give a model file clipflow wrote or one `clipflow models "
                            "import` made")  # fmt: skip
    digest = sha256_of(path)
    damaged = damage(path, digest)
    if damaged:
        raise ClipflowError(f"{what} {path} is {damaged}; make it again or restore a good copy")
    try:
        held = load_weights_only(path, what)
    except ClipflowError:
        raise
    except Exception as exc:
        raise ClipflowError(f"{what} {path} cannot be loaded ({str(exc).splitlines()[0]}); is it a model file "
                            "clipflow wrote or one `clipflow models import` made?") from None  # fmt: skip
    model = None
    if isinstance(held, dict):
        model = held.get("model_settings") or (held.get("recipe") or {}).get("model")
    if not isinstance(held, dict) or not isinstance(held.get("model"), dict) or not isinstance(model, dict):
        raise ClipflowError(
            f"{what} {path} holds no clipflow weights (a state dict under 'model' and the model it fits); turn a "
            "reference's own checkpoint into one with `clipflow models import FILE --from SOURCE --model NAME`"
        )
    return Weights(path, digest, held["model"], dict(model), dict(held.get("provenance") or {}))


def check_fits(weights: Weights, model: dict[str, Any], key: str) -> None:
    """ClipflowError naming the first setting of the architecture (``model.<name>``) where ``weights``' model and
    the run's ``model`` section differ; the classes (and dropout) may differ. ``key`` names the setting that gave the
    file (``train.init_from``, ``--weights``)."""
    theirs, ours = architecture(weights.model), architecture(model)
    if theirs.get("name") != ours.get("name"):
        raise ClipflowError(
            f"{key} {weights.path} holds a {weights.model.get('name')} model, but the recipe's model.name is "
            f"{model.get('name')}; set model.name: {weights.model.get('name')} or give weights of {model.get('name')}"
        )
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            raise ClipflowError(
                f"{key} {weights.path} was made with model.{name} {theirs.get(name)!r}, the recipe has "
                f"{ours.get(name)!r}; set model.{name}: {theirs.get(name)!r} to start from these weights"
            )


def architecture(section: dict[str, Any]) -> dict[str, Any]:
    """What of a model section decides the network's tensors: a SlowFast's whole spec (its preset filled in, so
    ``slowfast`` with a preset's very settings is that preset), or the section itself; never the classes or dropout."""
    from dataclasses import asdict

    from clipflow.models.slowfast_spec import slowfast_alpha, slowfast_settings, spec_of

    if slowfast_alpha(section) is None:
        return {k: v for k, v in section.items() if k not in FREE}
    spec = asdict(spec_of({**slowfast_settings(section), "num_classes": 1}))
    return {"name": "slowfast", **{k: v for k, v in spec.items() if k not in FREE}}
