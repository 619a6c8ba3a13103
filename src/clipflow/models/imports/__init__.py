"""Published weights into clipflow: `clipflow models import FILE --from SOURCE --model NAME --out FILE`.

A reference implementation's checkpoint, in its own format, becomes a clipflow weights file
(clipflow.models.weights: the state dict under ``model``, loadable with ``torch.load(weights_only=True)``, with the
model section it fits and its provenance). One module a reference, each with the same four names:

- ``MODELS``: clipflow's model name -> the reference's name of the same network;
- ``read(path)``: the file's tensors by the reference's names, as numpy arrays (read without running anything in
  the file: MXNet's binary format parsed, torch files loaded with weights only, Caffe2 pickles with an unpickler
  that builds numpy arrays and nothing else);
- ``rename(name, model)``: the clipflow state-dict key of a reference's tensor, or None for one with no place in
  clipflow's network (a solver's momentum, an iteration count): those are listed as skipped, never hidden;
- ``adapt(key, array)`` (optional): the array reshaped or reordered where the two layouts differ.

The sources: ``gluoncv`` (GluonCV 0.10.5's model zoo, MXNet ``.params``), ``pyslowfast`` (PySlowFast's ``.pyth``
and its Caffe2 ``.pkl``), ``pytorchvideo`` (PyTorchVideo's ``slowfast_r50`` state dict).
clipflow.models.imports.convert checks the whole mapping: every tensor of the source used or named as skipped,
every tensor of clipflow's network filled once, every shape equal (a shape that does not fit is named with both).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from clipflow.errors import ClipflowError

SOURCES = ("gluoncv", "pyslowfast", "pytorchvideo")


def source_module(source: str) -> ModuleType:
    """The module of reference ``source``; ClipflowError naming the known ones otherwise."""
    if source not in SOURCES:
        raise ClipflowError(f"--from {source!r} is not a known source; give one of {', '.join(SOURCES)}")
    return importlib.import_module(f"clipflow.models.imports.{source}")
