"""PySlowFast's SlowFast checkpoints -> clipflow's SlowFast (see clipflow.models.imports).

Two formats:

- ``.pyth`` (and ``.pt``): what PySlowFast's ``save_checkpoint`` writes, a torch file with the state dict under
  ``model_state`` beside ``epoch``, ``optimizer_state`` and ``cfg``; its names are the module paths of
  slowfast/models/video_model_builder.py: ``s1.pathway{0,1}_stem.{conv,bn}`` (stems, pathway 0 the slow one),
  ``s1_fuse`` .. ``s4_fuse`` ``.{conv_f2s,bn}`` (fast-to-slow fusions), ``s{2..5}.pathway{p}_res{j}.branch2.{a,b,c}``
  and ``{a,b,c}_bn`` (bottlenecks), ``.branch1`` and ``branch1_bn`` (projection shortcuts),
  ``head.projection`` (classifier).
- ``.pkl``: a Caffe2 checkpoint (how c2/SLOWFAST_8x8_R101_101_101 is published), a pickled dict whose ``blobs``
  are numpy arrays by Caffe2 name, which PySlowFast's utils/c2_model_loading.py renames: ``conv1_w`` /
  ``res_conv1_bn_{s,b,rm,riv}`` (slow stem; ``t_`` prefixed, the fast one), ``t_pool1_subsample_w`` and
  ``t_res{k}_{last block}_branch2c_bn_subsample_w`` with ``_bn_*`` (fusions after the stem and stage k),
  ``{t_}res{k}_{j}_branch2{a,b,c}_w`` / ``_bn_*`` and ``_branch1_w`` / ``_bn_*`` (bottlenecks), ``pred_{w,b}``;
  beside them the solver's ``*_momentum``, ``lr`` and ``model_iter``, skipped. BatchNorm: ``s`` scale, ``b`` bias,
  ``rm`` running mean, ``riv`` running variance (a variance, despite the name: PySlowFast copies it unchanged).

PySlowFast's network is clipflow's layer for layer (same kernels, paddings, strides on the 3x3 conv, BatchNorm
epsilon 1e-5), so nothing is reordered; its head adds a softmax in eval mode, which clipflow's leaves to its caller.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np

from clipflow.errors import ClipflowError
from clipflow.safe_load import load_weights_only

MODELS = {
    "slowfast_4x16_resnet50": "SLOWFAST_4x16_R50",
    "slowfast_8x8_resnet50": "SLOWFAST_8x8_R50",
    "slowfast_8x8_resnet101": "c2/SLOWFAST_8x8_R101_101_101",
}

# What a numpy array's pickle asks for, as numpy 1 (numpy.core) and numpy 2 (numpy._core) name it.
_NUMPY_GLOBALS = {
    (module, name)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {("numpy", "ndarray"), ("numpy", "dtype")}


def read(path: Path) -> dict[str, np.ndarray]:
    """The tensors of PySlowFast checkpoint ``path`` by their PySlowFast or Caffe2 names: a torch file loaded with
    weights only, a Caffe2 ``.pkl`` through an unpickler that builds numpy arrays and nothing else."""
    if Path(path).suffix == ".pkl":
        return read_caffe2(path)
    return read_torch(path, "PySlowFast checkpoint")


def read_torch(path: Path, what: str) -> dict[str, np.ndarray]:
    """The state dict in torch file ``path``, as numpy arrays: under ``model_state`` (PySlowFast), ``state_dict``
    or ``model``, or the file's dict itself (a plain ``torch.save(model.state_dict())``); a ``module.`` prefix
    (a DistributedDataParallel model's) dropped."""
    try:
        loaded = load_weights_only(path, what)
    except (RuntimeError, EOFError, pickle.UnpicklingError, OSError) as exc:
        raise ClipflowError(
            f"{what} {path} could not be read ({_first_line(exc)}); is it whole, and a torch file?"
        ) from None
    state = _state_dict(loaded, path, what)
    return {name.removeprefix("module."): _array(value, path, name) for name, value in state.items()}


def read_caffe2(path: Path) -> dict[str, np.ndarray]:
    """The ``blobs`` of Caffe2 checkpoint ``path`` (a Python 2 pickle, hence latin1 for its byte strings)."""
    try:
        with open(path, "rb") as f:
            loaded = _NumpyUnpickler(f, path).load()
    except ClipflowError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ClipflowError(f"Caffe2 checkpoint {path} could not be read ({_first_line(exc)}); is it whole?") from None
    blobs = loaded.get("blobs") if isinstance(loaded, dict) else None
    if not isinstance(blobs, dict):
        raise ClipflowError(f"Caffe2 checkpoint {path} has no 'blobs' dict; give a PySlowFast Caffe2 .pkl")
    return {str(name): _array(value, path, name) for name, value in blobs.items()}


class _NumpyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays, dicts, lists, strings and numbers; any other global is refused before it is looked
    up, so nothing the file names is imported or called."""

    def __init__(self, file: Any, path: Path):
        super().__init__(file, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _NUMPY_GLOBALS:
            raise ClipflowError(
                f"Caffe2 checkpoint {self.path}: its pickle asks for {module}.{name}, which a checkpoint of numpy "
                "arrays never holds (loading it could run code): not loaded; give the .pkl PySlowFast published"
            )
        return super().find_class(module, name)


def rename(name: str, model_name: str) -> str | None:
    """The clipflow key of PySlowFast tensor ``name`` (a ``.pyth`` name, or a Caffe2 blob name: those have no
    dots), or None for the Caffe2 solver's blobs; a name of neither form is refused."""
    key = _rename_caffe2(name) if "." not in name else _rename_torch(name)
    if key is False:
        return None
    if key is None:
        raise ClipflowError(f"tensor {name} is no tensor of a PySlowFast SlowFast; is the file a {MODELS[model_name]} "
                            "checkpoint of PySlowFast?")  # fmt: skip
    return key


def adapt(target: str, array: np.ndarray) -> np.ndarray:
    """A classifier stored as a 1x1x1 convolution (C, D, 1, 1, 1) or its bias with trailing ones, as the linear
    layer clipflow has; every other tensor as it is."""
    if target == "head.weight" and array.ndim > 2 and all(d == 1 for d in array.shape[2:]):
        return array.reshape(array.shape[:2])
    if target == "head.bias" and array.ndim > 1 and all(d == 1 for d in array.shape[1:]):
        return array.reshape(array.shape[:1])
    return array


_PATHWAY = {"0": "slow", "1": "fast"}
_CAFFE2_BN = {"s": "weight", "b": "bias", "rm": "running_mean", "riv": "running_var"}
_CAFFE2_LEAF = {"w": "weight", "b": "bias"}


def _rename_torch(name: str) -> str | None:
    if m := re.fullmatch(r"s1\.pathway([01])_stem\.(conv|bn)\.(\w+)", name):
        return f"{_PATHWAY[m[1]]}_stem.{m[2]}.{m[3]}"
    if m := re.fullmatch(r"s([1-4])_fuse\.(conv_f2s|bn)\.(\w+)", name):
        return f"{_fuse(int(m[1]))}.{'conv' if m[2] == 'conv_f2s' else 'bn'}.{m[3]}"
    layer = r"(?:branch2\.)?(a|b|c|a_bn|b_bn|c_bn|branch1|branch1_bn)"
    if m := re.fullmatch(rf"s([2-5])\.pathway([01])_res(\d+)\.{layer}\.(\w+)", name):
        return f"{_block(m[1], m[2], m[3])}.{_layer(m[4])}.{m[5]}"
    if m := re.fullmatch(r"head\.projection\.(weight|bias)", name):
        return f"head.{m[1]}"
    return None


def _rename_caffe2(name: str) -> str | None | bool:
    """The clipflow key of a Caffe2 blob; False for a solver's blob (no place in the network); None if unknown."""
    if name in ("lr", "model_iter") or name.endswith("_momentum"):
        return False
    bn = r"_bn_(s|b|rm|riv)"
    if m := re.fullmatch(rf"(t_)?(?:conv1_(w)|res_conv1{bn})", name):
        stem = f"{'fast' if m[1] else 'slow'}_stem"
        return f"{stem}.conv.weight" if m[2] else f"{stem}.bn.{_CAFFE2_BN[m[3]]}"
    if m := re.fullmatch(rf"t_(?:pool1|res([2-4])_(\d+)_branch2c_bn)_subsample(?:_(w)|{bn})", name):
        stage = int(m[1]) if m[1] else 1  # the block number (the stage's last) tells the depth, the blocks check it
        return f"{_fuse(stage)}.conv.weight" if m[3] else f"{_fuse(stage)}.bn.{_CAFFE2_BN[m[4]]}"
    if m := re.fullmatch(rf"(t_)?res([2-5])_(\d+)_branch(1|2[abc])(?:_(w)|{bn})", name):
        layer = "branch1" if m[4] == "1" else m[4][1]
        pathway = "1" if m[1] else "0"
        if m[5]:
            return f"{_block(m[2], pathway, m[3])}.{_layer(layer)}.weight"
        return f"{_block(m[2], pathway, m[3])}.{_layer(layer + '_bn')}.{_CAFFE2_BN[m[6]]}"
    if m := re.fullmatch(r"pred_(w|b)", name):
        return f"head.{_CAFFE2_LEAF[m[1]]}"
    return None


def _fuse(stage: int) -> str:
    """clipflow's fusion after PySlowFast's stage ``stage`` (1: the stem)."""
    return "fuse_stem" if stage == 1 else f"fuses.{stage - 2}"


def _block(stage: str, pathway: str, block: str) -> str:
    return f"{_PATHWAY[pathway]}_stages.{int(stage) - 2}.{int(block)}"


def _layer(layer: str) -> str:
    """clipflow's layer of a bottleneck for PySlowFast's (a, a_bn, ..., branch1, branch1_bn)."""
    return {"branch1": "shortcut.0", "branch1_bn": "shortcut.1"}.get(layer, layer)


def _state_dict(loaded: Any, path: Path, what: str) -> dict[str, Any]:
    if isinstance(loaded, dict):
        for key in ("model_state", "state_dict", "model"):
            if isinstance(loaded.get(key), dict):
                return loaded[key]
        if loaded and all(hasattr(v, "shape") for v in loaded.values()):
            return loaded
    raise ClipflowError(f"{what} {path} holds no state dict (under model_state, state_dict or model, or as the file "
                        "itself); give the checkpoint file the reference wrote")  # fmt: skip


def _array(value: Any, path: Path, name: str) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, int | float):
        return np.asarray(value)
    raise ClipflowError(f"{path}: entry {name} is a {type(value).__name__}, not a tensor; is it a checkpoint?")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
