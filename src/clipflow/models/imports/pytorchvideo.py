"""PyTorchVideo's ``slowfast_r50`` state dict -> clipflow's slowfast_8x8_resnet50 (see clipflow.models.imports).

PyTorchVideo 0.1.5's hub ``slowfast_r50`` is ``create_slowfast`` (pytorchvideo/models/slowfast.py) with depth 50,
a fusion kernel of 7 and its defaults: fusion stride (alpha) 4, fast channels 1/8 (beta_inv 8), channel ratio 2,
stems (1,7,7) and (5,7,7), bottleneck temporal kernels slow (1,1,3,3) and fast (3,3,3,3), the stride on the 3x3
conv, BatchNorm epsilon 1e-5, 8 slow and 32 fast frames of 224 pixels: PySlowFast's SLOWFAST_8x8_R50, clipflow's
``slowfast_8x8_resnet50``. Its head has no activation (logits, as clipflow's).

Its names are the module paths of that network: ``blocks.0.multipathway_blocks.{0 slow,1 fast}.{conv,norm}``
(stems), ``blocks.{0..3}.multipathway_fusion.{conv_fast_to_slow,norm}`` (fusions after the stem and stages 1-3),
``blocks.{1..4}.multipathway_blocks.{p}.res_blocks.{j}.branch2.{conv,norm}_{a,b,c}`` and ``branch1_{conv,norm}``
(bottlenecks and their projection shortcuts), ``blocks.6.proj`` (classifier; blocks.5 pools, without weights).
The hub's file is the state dict itself; one saved as a checkpoint (under ``state_dict`` or ``model``) reads too.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from clipflow.errors import ClipflowError
from clipflow.models.imports.pyslowfast import read_torch

MODELS = {"slowfast_8x8_resnet50": "slowfast_r50"}

_PATHWAY = {"0": "slow", "1": "fast"}
_BN = r"(weight|bias|running_mean|running_var|num_batches_tracked)"


def read(path: Path) -> dict[str, np.ndarray]:
    """The tensors of PyTorchVideo state-dict file ``path`` by PyTorchVideo's names (loaded with weights only)."""
    return read_torch(path, "PyTorchVideo state dict")


def rename(name: str, model_name: str) -> str:
    """The clipflow key of PyTorchVideo tensor ``name``; every tensor of slowfast_r50 has one."""
    if m := re.fullmatch(rf"blocks\.0\.multipathway_blocks\.([01])\.(?:conv\.(weight)|norm\.{_BN})", name):
        stem = f"{_PATHWAY[m[1]]}_stem"
        return f"{stem}.conv.weight" if m[2] else f"{stem}.bn.{m[3]}"
    if m := re.fullmatch(rf"blocks\.([0-3])\.multipathway_fusion\.(?:conv_fast_to_slow\.(weight)|norm\.{_BN})", name):
        fuse = "fuse_stem" if m[1] == "0" else f"fuses.{int(m[1]) - 1}"
        return f"{fuse}.conv.weight" if m[2] else f"{fuse}.bn.{m[3]}"
    block = r"blocks\.([1-4])\.multipathway_blocks\.([01])\.res_blocks\.(\d+)"
    layer = r"(branch1_conv|branch1_norm|branch2\.conv_[abc]|branch2\.norm_[abc])"
    if m := re.fullmatch(rf"{block}\.{layer}\.(\w+)", name):
        ours = {"branch1_conv": "shortcut.0", "branch1_norm": "shortcut.1"}.get(m[4])
        if ours is None:
            kind, letter = m[4].removeprefix("branch2.").split("_")
            ours = letter if kind == "conv" else f"{letter}_bn"
        return f"{_PATHWAY[m[2]]}_stages.{int(m[1]) - 1}.{int(m[3])}.{ours}.{m[5]}"
    if m := re.fullmatch(r"blocks\.\d+\.proj\.(weight|bias)", name):
        return f"head.{m[1]}"
    raise ClipflowError(f"tensor {name} is no tensor of PyTorchVideo's slowfast_r50; is the file the state dict of "
                        f"slowfast_r50 ({model_name})?")  # fmt: skip
