"""GluonCV 0.10.5's action-recognition model zoo (MXNet ``.params``) -> clipflow's SlowFast and I3D.

GluonCV's networks (gluoncv/model_zoo/action_recognition/slowfast.py and i3d_resnet.py) have clipflow's layout
layer for layer, so every tensor has a place and keeps its shape; only the names differ. A file names them one of
two ways:

- ``save_parameters`` (what the model zoo publishes): the blocks' attribute paths. SlowFast:
  ``{slow,fast}_conv1`` / ``_bn1`` (stems), ``lateral_{p1,res2,res3,res4}.{0 conv,1 bn}`` (fast-to-slow fusions),
  ``{slow,fast}_res{2..5}.{block}.{conv,bn}{1,2,3}`` and ``.downsample.{0,1}`` (bottlenecks), ``fc``. I3D:
  ``first_stage.{0,1}``, ``res_layers.{stage}.{block}.…`` as above, ``fc``; its blocks are also registered a second
  time (each bottleneck's layers as ``bottleneck.{0,1,3,4,6,7}``, the classifier as ``head.1``), so the file holds
  those tensors twice: :func:`read` keeps one of each pair (refusing a pair that differs).
- ``export`` / ``save_checkpoint``: the symbol's names, ``arg:``/``aux:`` stripped by the reader:
  ``slowfast0_fast_res2_block0_conv0_weight``, ``layer1_downsample_batchnorm0_gamma``, ``dense0_bias``…, the layers
  of a block numbered from 0 in the order they were made.

GluonCV's SlowFast takes ONE clip: the fast frames (32) then the slow ones (4 or 8) concatenated in time
(``hybrid_forward`` slices ``[:fast_frames]`` and ``[fast_frames:fast_frames + slow_frames]``); clipflow's takes
``(slow, fast)``. Its classifier reads the slow features then the fast ones, as clipflow's does, so no tensor is
reordered. BatchNorm: Gluon's gamma, beta are torch's weight, bias; epsilon 1e-5 in both.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from clipflow.errors import ClipflowError
from clipflow.models.imports.mxnet_params import read_params

MODELS = {
    "slowfast_4x16_resnet50": "slowfast_4x16_resnet50_kinetics400",
    "slowfast_8x8_resnet50": "slowfast_8x8_resnet50_kinetics400",
    "slowfast_8x8_resnet101": "slowfast_8x8_resnet101_kinetics400",
    "i3d_resnet50_v1": "i3d_resnet50_v1_kinetics400",
}

# a layer's parameters: Gluon's name -> torch's
PARAMS = {
    "conv": {"weight": "weight"},
    "bn": {"gamma": "weight", "beta": "bias", "running_mean": "running_mean", "running_var": "running_var"},
    "linear": {"weight": "weight", "bias": "bias"},
}
# I3D's second names of a bottleneck's layers: the index in its `bottleneck` HybridSequential (2 and 5 are ReLUs)
I3D_SEQUENCE = {"0": "conv1", "1": "bn1", "3": "conv2", "4": "bn2", "6": "conv3", "7": "bn3"}
LATERALS = {"p1": "fuse_stem", "res2": "fuses.0", "res3": "fuses.1", "res4": "fuses.2"}
PARAM = r"(?P<param>weight|bias|gamma|beta|running_mean|running_var)"


def read(path: Path) -> dict[str, np.ndarray]:
    """The tensors of GluonCV checkpoint ``path`` by GluonCV's names, each once (I3D's second names of one
    parameter dropped where the first is there too); ClipflowError naming the file and what is wrong."""
    tensors = read_params(path)
    for name in list(tensors):
        first = _first_name(name)
        if first is None or first not in tensors:
            continue
        if tensors[first].shape != tensors[name].shape or not np.array_equal(tensors[first], tensors[name]):
            raise ClipflowError(f"{path}: {name} and {first} are one parameter of GluonCV's I3D but differ in the "
                                f"file; give the file as save_parameters wrote it")  # fmt: skip
        del tensors[name]
    return tensors


def rename(name: str, model_name: str) -> str | None:
    """The key in clipflow's ``model_name`` (one of :data:`MODELS`: the importer checks it) of GluonCV's tensor
    ``name`` (either naming; never None: every tensor of these networks has a place); ClipflowError for a name the
    network does not have."""
    if model_name.startswith("slowfast"):
        key = _slowfast_key(re.sub(r"^slowfast\d+_", "", name))
    else:
        key = _i3d_key(name)
        key = key and f"net.{key}"
    if key is None:
        raise ClipflowError(f"tensor {name} is not one of GluonCV's {MODELS[model_name]}; is the file a checkpoint "
                            f"of that model? (--model names the network it was saved from)")  # fmt: skip
    return key


def _first_name(name: str) -> str | None:
    """The attribute-path name of I3D's parameter saved under its second name ``name``, else None."""
    found = re.fullmatch(r"(res_layers\.\d+\.\d+)\.bottleneck\.(\d)\.(\w+)", name)
    if found and found[2] in I3D_SEQUENCE:
        return f"{found[1]}.{I3D_SEQUENCE[found[2]]}.{found[3]}"
    found = re.fullmatch(r"head\.1\.(weight|bias)", name)
    return f"fc.{found[1]}" if found else None


def _slowfast_key(name: str) -> str | None:
    block = r"(?P<path>slow|fast)_res(?P<stage>[2-5])"
    patterns = [
        # save_parameters
        (rf"(?P<path>slow|fast)_(?P<kind>conv|bn)1\.{PARAM}", lambda m: _layer(f"{m['path']}_stem", m["kind"])),
        (rf"lateral_(?P<at>p1|res[234])\.(?P<i>[01])\.{PARAM}", lambda m: _layer(LATERALS[m["at"]], int(m["i"]))),
        (
            rf"{block}\.(?P<block>\d+)\.(?P<kind>conv|bn)(?P<j>[123])\.{PARAM}",
            lambda m: _block_layer(_stage(m), m["kind"], int(m["j"]) - 1),
        ),
        (
            rf"{block}\.(?P<block>0)\.downsample\.(?P<i>[01])\.{PARAM}",
            lambda m: _indexed(f"{_stage(m)}.shortcut", int(m["i"])),
        ),
        (r"fc\.(?P<param>weight|bias)", lambda m: ("head", "linear")),
        # export / save_checkpoint: a block's convs and BatchNorms numbered from 0
        (rf"(?P<path>slow|fast)_(?P<kind>conv|batchnorm)0_{PARAM}", lambda m: _layer(f"{m['path']}_stem", m["kind"])),
        (
            rf"lateral_(?P<at>p1|res[234])_(?P<kind>conv|batchnorm)0_{PARAM}",
            lambda m: _layer(LATERALS[m["at"]], m["kind"]),
        ),
        (
            rf"{block}_block(?P<block>\d+)_(?P<kind>conv|batchnorm)(?P<j>[012])_{PARAM}",
            lambda m: _block_layer(_stage(m), m["kind"], int(m["j"])),
        ),
        (
            rf"{block}_downsample_(?P<kind>conv|batchnorm)0_{PARAM}",
            lambda m: _indexed(f"{m['path']}_stages.{int(m['stage']) - 2}.0.shortcut", m["kind"]),
        ),
        (r"dense\d+_(?P<param>weight|bias)", lambda m: ("head", "linear")),
    ]
    return _match(name, patterns)


def _i3d_key(name: str) -> str | None:
    block = r"res_layers\.(?P<stage>[0-3])\.(?P<block>\d+)"
    patterns = [
        # save_parameters
        (rf"first_stage\.(?P<i>[01])\.{PARAM}", lambda m: _indexed("stem", int(m["i"]))),
        (
            rf"{block}\.(?P<kind>conv|bn)(?P<j>[123])\.{PARAM}",
            lambda m: (_i3d_block(m, f"{m['kind']}{m['j']}"), _kind(m["kind"])),
        ),
        (
            rf"{block}\.bottleneck\.(?P<i>[013467])\.{PARAM}",
            lambda m: (_i3d_block(m, I3D_SEQUENCE[m["i"]]), _kind(I3D_SEQUENCE[m["i"]][:-1])),
        ),
        (
            rf"res_layers\.(?P<stage>[0-3])\.(?P<block>0)\.downsample\.(?P<i>[01])\.{PARAM}",
            lambda m: _indexed(_i3d_block(m, "shortcut"), int(m["i"])),
        ),
        (r"(?:fc|head\.1)\.(?P<param>weight|bias)", lambda m: ("fc", "linear")),
        # export / save_checkpoint: the stem's layers and the classifier numbered by the process that made them
        (rf"conv\d+_{PARAM}", lambda m: ("stem.0", "conv")),
        (rf"batchnorm\d+_{PARAM}", lambda m: ("stem.1", "bn")),
        (
            rf"layer(?P<stage1>[1-4])_(?P<block>\d+)_(?P<kind>conv|batchnorm)(?P<j>[012])_{PARAM}",
            lambda m: (_i3d_block(m, f"{_kind(m['kind'])}{int(m['j']) + 1}"), _kind(m["kind"])),
        ),
        (
            rf"layer(?P<stage1>[1-4])_downsample_(?P<kind>conv|batchnorm)0_{PARAM}",
            lambda m: _indexed(f"stages.{int(m['stage1']) - 1}.0.shortcut", m["kind"]),
        ),
        (r"dense\d+_(?P<param>weight|bias)", lambda m: ("fc", "linear")),
    ]
    return _match(name, patterns)


def _match(name: str, patterns: list) -> str | None:
    """The key of the first pattern ``name`` matches whose layer has ``name``'s parameter, else None."""
    for pattern, place in patterns:
        found = re.fullmatch(pattern, name)
        if found is None:
            continue
        module, kind = place(found)
        param = PARAMS[kind].get(found["param"])
        return None if param is None else f"{module}.{param}"
    return None


def _kind(kind: str) -> str:
    """``conv`` or ``bn``, from either naming's word for the layer."""
    return "conv" if kind == "conv" else "bn"


def _layer(module: str, kind: str | int) -> tuple[str, str]:
    """A stem's or a lateral's ``conv`` or ``bn`` (kind a word, or 0/1: its index in a HybridSequential)."""
    kind = ("conv", "bn")[kind] if isinstance(kind, int) else _kind(kind)
    return f"{module}.{kind}", kind


def _indexed(module: str, kind: str | int) -> tuple[str, str]:
    """A torch Sequential's conv (0) or BatchNorm (1), from the index or the word."""
    index = kind if isinstance(kind, int) else int(_kind(kind) == "bn")
    return f"{module}.{index}", ("conv", "bn")[index]


def _block_layer(stage: str, kind: str, j: int) -> tuple[str, str]:
    """The j-th (0..2) conv or BatchNorm of a SlowFast bottleneck."""
    kind = _kind(kind)
    return f"{stage}.{'abc'[j]}{'_bn' if kind == 'bn' else ''}", kind


def _stage(m: re.Match) -> str:
    return f"{m['path']}_stages.{int(m['stage']) - 2}.{int(m['block'])}"


def _i3d_block(m: re.Match, layer: str) -> str:
    groups = m.groupdict()
    stage = int(groups["stage"]) if groups.get("stage") is not None else int(groups["stage1"]) - 1
    return f"stages.{stage}.{int(m['block'])}.{layer}"
