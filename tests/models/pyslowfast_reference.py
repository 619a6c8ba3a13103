"""Runs inside the PySlowFast venv (slowfast==1.0, see pyslowfast_requirements.txt): builds one published SlowFast
network in PySlowFast's own code with random weights (pyslowfast_randomise.py), writes its checkpoint as PySlowFast
writes it (``save_checkpoint``: a dict with ``model_state``), and, with ``--caffe2``, as a Caffe2 ``.pkl`` (a dict
with ``blobs`` of numpy arrays under the Caffe2 names, checked by loading it back with PySlowFast's own Caffe2
loader), then runs the network in eval mode on the slow and fast frames of two ``.npy`` files and writes the logits
before the head's softmax (``logits.npy``) and its output (``probs.npy``).

usage: pyslowfast_reference.py MODEL SLOW.npy FAST.npy OUT_DIR [--caffe2]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import torch
from pyslowfast_randomise import randomise

# PySlowFast's head_helper imports detectron2's ROIAlign for the AVA detection head, which these classification
# networks never build; detectron2 has no pure-Python release, so a stand-in module lets the import pass.
_detectron2 = types.ModuleType("detectron2")
_detectron2.layers = types.ModuleType("detectron2.layers")
_detectron2.layers.ROIAlign = None
sys.modules.update({"detectron2": _detectron2, "detectron2.layers": _detectron2.layers})

from slowfast.config.defaults import get_cfg  # noqa: E402
from slowfast.models.video_model_builder import SlowFastModel  # noqa: E402
from slowfast.utils import checkpoint  # noqa: E402
from slowfast.utils.c2_model_loading import get_name_convert_func  # noqa: E402

# The settings of PySlowFast's configs/Kinetics/SLOWFAST_4x16_R50.yaml, SLOWFAST_8x8_R50.yaml and
# c2/SLOWFAST_8x8_R101_101_101.yaml that shape the network (the rest are slowfast==1.0's defaults).
CONFIGS = {
    "slowfast_4x16_resnet50": {"ALPHA": 8, "FUSION_KERNEL_SZ": 5, "DEPTH": 50},
    "slowfast_8x8_resnet50": {"ALPHA": 4, "FUSION_KERNEL_SZ": 7, "DEPTH": 50},
    "slowfast_8x8_resnet101": {"ALPHA": 4, "FUSION_KERNEL_SZ": 5, "DEPTH": 101},
}
STAGE_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


def config(name: str, frames: int, size: int):
    """PySlowFast's config of model ``name`` for clips of ``frames`` fast frames of ``size`` pixels square (the head
    pools over the whole of such a clip)."""
    settings = CONFIGS[name]
    cfg = get_cfg()
    cfg.NUM_GPUS = 1
    cfg.MODEL.ARCH = "slowfast"
    cfg.MODEL.NUM_CLASSES = 400
    cfg.MODEL.DROPOUT_RATE = 0.5
    cfg.DATA.NUM_FRAMES = frames
    cfg.DATA.CROP_SIZE = size
    cfg.DATA.INPUT_CHANNEL_NUM = [3, 3]
    cfg.SLOWFAST.ALPHA = settings["ALPHA"]
    cfg.SLOWFAST.BETA_INV = 8
    cfg.SLOWFAST.FUSION_CONV_CHANNEL_RATIO = 2
    cfg.SLOWFAST.FUSION_KERNEL_SZ = settings["FUSION_KERNEL_SZ"]
    cfg.RESNET.DEPTH = settings["DEPTH"]
    cfg.RESNET.ZERO_INIT_FINAL_BN = True
    cfg.RESNET.WIDTH_PER_GROUP = 64
    cfg.RESNET.NUM_GROUPS = 1
    cfg.RESNET.TRANS_FUNC = "bottleneck_transform"
    cfg.RESNET.STRIDE_1X1 = False
    cfg.RESNET.NUM_BLOCK_TEMP_KERNEL = [[d, d] for d in STAGE_DEPTHS[settings["DEPTH"]]]
    cfg.RESNET.SPATIAL_STRIDES = [[1, 1], [2, 2], [2, 2], [2, 2]]
    cfg.RESNET.SPATIAL_DILATIONS = [[1, 1]] * 4
    cfg.NONLOCAL.LOCATION = [[[], []]] * 4
    cfg.NONLOCAL.GROUP = [[1, 1]] * 4
    cfg.NONLOCAL.POOL = [[[1, 2, 2], [1, 2, 2]]] * 4
    cfg.NONLOCAL.INSTANTIATION = "dot_product"
    return cfg


_BN = {"weight": "s", "bias": "b", "running_mean": "rm", "running_var": "riv"}


def caffe2_name(name: str, depth: int) -> str | None:
    """The Caffe2 blob name of PySlowFast state-dict entry ``name`` (None for ``num_batches_tracked``, which
    Caffe2 has not): the inverse of PySlowFast's utils/c2_model_loading.py naming."""
    parts = name.split(".")
    if parts[-1] == "num_batches_tracked":
        return None
    leaf = {"weight": "w", "bias": "b"}[parts[-1]] if parts[-2] not in ("bn",) and "_bn" not in parts[-2] else None
    bn = _BN[parts[-1]]
    if parts[0] == "head":  # head.projection.{weight,bias}
        return f"pred_{leaf}"
    if parts[0] == "s1" and parts[2] == "conv":  # s1.pathway{p}_stem.conv.weight
        return f"{'t_' if parts[1] == 'pathway1_stem' else ''}conv1_{leaf}"
    if parts[0] == "s1":  # s1.pathway{p}_stem.bn.X
        return f"{'t_' if parts[1] == 'pathway1_stem' else ''}res_conv1_bn_{bn}"
    if parts[0].endswith("_fuse"):  # s{k}_fuse.{conv_f2s,bn}.X
        stage = int(parts[0][1])
        base = (
            "t_pool1_subsample"
            if stage == 1
            else f"t_res{stage}_{STAGE_DEPTHS[depth][stage - 2] - 1}_branch2c_bn_subsample"
        )
        return f"{base}_{leaf}" if parts[1] == "conv_f2s" else f"{base}_bn_{bn}"
    # s{k}.pathway{p}_res{j}.branch2.{a,a_bn,...}.X or s{k}.pathway{p}_res{j}.{branch1,branch1_bn}.X
    stage, (pathway, block) = parts[0][1:], parts[1].split("_res")
    base = f"{'t_' if pathway == 'pathway1' else ''}res{stage}_{block}"
    if parts[2] == "branch2":
        layer = parts[3]
        return f"{base}_branch2{layer}_{leaf}" if leaf else f"{base}_branch2{layer[0]}_bn_{bn}"
    return f"{base}_{parts[2]}_{leaf}" if leaf else f"{base}_branch1_bn_{bn}"


def write_caffe2(model, depth: int, path: Path) -> None:
    """``model``'s weights as a Caffe2 ``.pkl``: ``blobs`` of numpy arrays by Caffe2 name, with the momentum,
    learning rate and iteration blobs a Caffe2 training run saves beside them (pickle protocol 4: the arrays as
    bytes, not through _codecs.encode as protocol 2 writes bytes from Python 3)."""
    blobs = {}
    for name, tensor in model.state_dict().items():
        blob = caffe2_name(name, depth)
        if blob is not None:
            blobs[blob] = tensor.numpy().copy()
            if blob in ("conv1_w", "pred_w", "pred_b"):  # a few, not all: they would double the file
                blobs[f"{blob}_momentum"] = np.zeros_like(blobs[blob])
    blobs["lr"] = np.array([0.1], dtype=np.float32)
    blobs["model_iter"] = np.array([1000], dtype=np.int64)
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=4)
    # PySlowFast's own Caffe2 naming must read every blob back as the tensor it came from (what its
    # load_checkpoint(convert_from_caffe2=True) does, minus its state_dict() call per blob: minutes for a ResNet-101).
    state = model.state_dict()
    convert = get_name_convert_func()
    for blob, array in blobs.items():
        name = convert(blob)
        if name in state and state[name].shape == array.shape:
            continue
        if name not in state and any(s in blob for s in ("momentum", "lr", "model_iter")):
            continue
        raise SystemExit(f"PySlowFast reads blob {blob} {array.shape} of {path} as {name}, not a tensor of that shape")
    missing = set(state) - {convert(blob) for blob in blobs} - {n for n in state if n.endswith("num_batches_tracked")}
    if missing:
        raise SystemExit(f"{path} has no blob for {sorted(missing)[:3]}")


class _Optimizer:
    """What save_checkpoint asks of the optimizer: the state dict of an SGD that has not stepped yet (importing
    torch.optim costs seconds, loading torch's compiler)."""

    def __init__(self, parameters: int):
        self.parameters = parameters

    def state_dict(self) -> dict:
        group = {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 1e-4, "nesterov": False}
        return {"state": {}, "param_groups": [{**group, "params": list(range(self.parameters))}]}


def write(model_name: str, slow_path: Path, fast_path: Path, out: Path, form: str) -> None:
    """One model of PySlowFast's, random and seeded: its checkpoint in ``out`` (``model.pyth`` as save_checkpoint
    writes it, or ``model.pkl`` with Caffe2's names), its logits and its softmax output on the clip."""
    torch.manual_seed(0)
    slow, fast = (torch.from_numpy(np.load(p)) for p in (slow_path, fast_path))
    cfg = config(model_name, frames=fast.shape[2], size=fast.shape[3])
    model = SlowFastModel(cfg)
    randomise(model, lambda: model([slow, fast]), model.head.projection)
    logits = []
    model.head.projection.register_forward_hook(lambda module, inputs, output: logits.append(output))
    with torch.no_grad():
        probs = model([slow, fast])
    np.save(out / "logits.npy", logits[0].reshape(logits[0].shape[0], -1).numpy())
    np.save(out / "probs.npy", probs.numpy())
    if form == "pkl":
        write_caffe2(model, CONFIGS[model_name]["DEPTH"], out / "model.pkl")
        return
    optimizer = _Optimizer(sum(1 for _ in model.parameters()))
    written = checkpoint.save_checkpoint(str(out), model, optimizer, 0, cfg)
    Path(written).rename(out / "model.pyth")


def main() -> None:
    parser = argparse.ArgumentParser(description="writes PySlowFast models, one --model each, in one process")
    parser.add_argument("fast", type=Path)
    parser.add_argument("--model", nargs=4, action="append", required=True, metavar=("NAME", "SLOW", "OUT", "FORM"),
                        help="a model name of CONFIGS, its slow frames (.npy), its folder, pyth or pkl")  # fmt: skip
    args = parser.parse_args()
    for name, slow, out, form in args.model:
        if name not in CONFIGS or form not in ("pyth", "pkl"):
            raise SystemExit(f"unknown model {name} or form {form}")
        write(name, Path(slow), args.fast, Path(out), form)


if __name__ == "__main__":
    main()
