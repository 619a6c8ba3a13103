"""How a training step runs the model: precision, memory layout, compilation.

``StepOptions.from_recipe(recipe)`` reads ``precision`` (``fp32``, or ``bf16``: autocast
to bfloat16 on the model's device, BatchNorm and the loss staying float32, as torch's
autocast lists them), ``channels_last`` (model and clips in channels_last_3d, images in
channels_last: the layouts cuDNN's and oneDNN's convolutions prefer) and ``compile``
(torch.compile of the model). ``prepare(model)`` applies the layout and compilation once;
``logits(model, *inputs)`` (slow and fast clips, or one batch of images) runs the forward
under the chosen precision. The trainer, bench/train_step.py and the timed step
(clipflow.models.step_timing: the link check's prediction, the loader's sizing) go through here, so they measure the
trainer's step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from clipflow.errors import ClipflowError

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class StepOptions:
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ClipflowError(f"train.precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")

    @classmethod
    def from_recipe(cls, recipe: dict) -> StepOptions:
        """The recipe's train.precision, channels_last and compile (the schema fills the defaults)."""
        t = recipe["train"]
        return cls(t["precision"], t["channels_last"], t["compile"])

    def prepare(self, model: nn.Module, images: bool = False) -> nn.Module:
        """The model to call: :meth:`layout`, then :meth:`compiled`."""
        return self.compiled(self.layout(model, images))

    def layout(self, model: nn.Module, images: bool = False) -> nn.Module:
        """``model`` with its parameters in channels_last_3d (channels_last for an image model) if asked, in place:
        before a back end wraps it, so the gradient buckets are made for these strides."""
        if self.channels_last:
            model.to(memory_format=torch.channels_last if images else torch.channels_last_3d)
        return model

    def compiled(self, model: nn.Module) -> nn.Module:
        """``model`` through torch.compile if asked (the same parameters: optimizers and hooks keep working)."""
        return torch.compile(model) if self.compile else model

    def logits(self, model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
        """The forward pass of one step (the loss is for the caller, outside autocast: float32)."""
        if self.channels_last:
            inputs = tuple(_channels_last(x) for x in inputs)
        with self._autocast(inputs[0].device.type):
            out = model(*inputs)
        return out.float()

    def _autocast(self, device_type: str):
        if self.precision == "bf16":
            return torch.autocast(device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """A batch of clips (N, C, T, H, W) in channels_last_3d, of images (N, C, H, W) in channels_last."""
    return x.contiguous(memory_format=torch.channels_last_3d if x.dim() == 5 else torch.channels_last)
