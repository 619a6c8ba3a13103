"""Runs inside the PyTorchVideo venv (pytorchvideo==0.1.5, see pytorchvideo_requirements.txt): builds the hub's
``slowfast_r50`` in PyTorchVideo's own code (no weights downloaded) with random weights (pyslowfast_randomise.py),
its head pooling the whole of the test's clip, saves its state dict with ``torch.save`` (as the hub's file is), runs
it in eval mode on the slow and fast frames of two ``.npy`` files and writes its output (logits: the hub's model has
no head activation) to ``logits.npy``.

usage: pytorchvideo_reference.py SLOW.npy FAST.npy OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from pyslowfast_randomise import randomise
from pytorchvideo.models.hub import slowfast_r50


def main() -> None:
    slow_path, fast_path, out = (Path(a) for a in sys.argv[1:4])
    torch.manual_seed(0)
    slow, fast = (torch.from_numpy(np.load(p)) for p in (slow_path, fast_path))
    side = fast.shape[3] // 32  # the head's pooling: the whole clip, as for the hub's 8 and 32 frames of 224 pixels
    model = slowfast_r50(
        pretrained=False, head_pool_kernel_sizes=((slow.shape[2], side, side), (fast.shape[2], side, side))
    )
    randomise(model, lambda: model([slow, fast]), model.blocks[6].proj)
    with torch.no_grad():
        logits = model([slow, fast])
    np.save(out / "logits.npy", logits.numpy())
    torch.save(model.state_dict(), out / "slowfast_r50.pyth")


if __name__ == "__main__":
    main()
