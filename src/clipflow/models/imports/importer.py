"""`clipflow models import`: read a reference's checkpoint, convert it, write a clipflow weights file."""

from __future__ import annotations

from pathlib import Path

from clipflow.checksums import sha256_of
from clipflow.errors import ClipflowError
from clipflow.models.imports import source_module
from clipflow.models.imports.convert import Converted, convert, provenance
from clipflow.saving import atomic_save


def import_weights(path: str | Path, source: str, model: str, out: str | Path) -> Converted:
    """Writes ``out`` (with its ``.sha256``) from reference ``source``'s checkpoint ``path`` of clipflow's ``model``;
    returns what was converted. ClipflowError naming the file, the tensor and the way out otherwise."""
    module = source_module(source)
    if model not in module.MODELS:
        raise ClipflowError(f"--model {model}: {source} has no such model; it has {', '.join(module.MODELS)}")
    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"{path} does not exist; give the {source} checkpoint to import")
    converted = convert(module.read(path), module, model, path)
    atomic_save(
        {
            "model": converted.state,
            "model_settings": {"name": model, "num_classes": converted.num_classes},
            "provenance": provenance(converted, source, path, sha256_of(path), module.MODELS[model]),
        },
        out,
    )
    return converted
