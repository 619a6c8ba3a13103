"""Loading torch files without running what they hold: ``torch.load(..., weights_only=True)``.

A ``.pt`` file is a pickle, and a pickle may ask for any Python callable, so a checkpoint or model from elsewhere (a
download, a copy collected from a host) could run code as it loads. clipflow loads every such file with torch's
weights-only unpickler, which builds tensors and plain values (dicts, lists, tuples, numbers, strings) only, and
allows by name just the one other thing a clipflow file has ever held: the numpy array of the numpy RNG state in a
checkpoint written before that state was stored as a plain list (:data:`ALLOWED`). A file that wants anything
else is refused, naming the file and the global it wanted; nothing of it runs.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

from clipflow.errors import ClipflowError

UNSUPPORTED = re.compile(r"Unsupported global: GLOBAL (\S+)")


def allowed() -> list:
    """What torch's weights-only unpickler may build beyond its defaults: a uint32 numpy array (as numpy 1 and 2
    name its reconstructor), from the ``rng`` of a checkpoint an earlier clipflow wrote."""
    import numpy as np
    from numpy._core import multiarray

    return [
        np.ndarray,
        np.dtype,
        np.dtypes.UInt32DType,
        multiarray._reconstruct,
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
    ]


def load_weights_only(path: str | Path, what: str) -> Any:
    """What the torch file ``path`` holds, loaded on the CPU with weights only. ClipflowError, one line naming
    ``what`` (e.g. "checkpoint"), the file and the global it wanted, when its pickle asks for anything else;
    other failures (a missing or truncated file) go up as they are."""
    import torch

    try:
        with torch.serialization.safe_globals(allowed()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        wanted = UNSUPPORTED.search(str(exc))
        if wanted is None:
            raise
        raise ClipflowError(
            f"{what} {path}: its pickle asks for {wanted.group(1).rstrip('.,')}, which no file clipflow writes "
            "holds (loading it could run code): not loaded; use a file clipflow wrote, or, if you trust this one, "
            "load it yourself and save its tensors again with torch.save"
        ) from None
