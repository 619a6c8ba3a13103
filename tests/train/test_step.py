"""StepOptions: the trainer's forward in bf16, in channels_last_3d, compiled, against plain fp32 eager."""

from __future__ import annotations

import shutil

import pytest
import torch

from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model
from clipflow.models.step import StepOptions
from clipflow.recipe import load_recipe


def tiny() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(load_recipe("slowfast_tiny_synthetic")["model"]).eval()
    return model, torch.randn(2, 3, 4, 32, 32), torch.randn(2, 3, 16, 32, 32)


def test_bf16_runs_the_convolutions_in_bfloat16_and_stays_close_to_fp32():
    model, slow, fast = tiny()
    seen: list[torch.dtype] = []
    model.slow_stem.conv.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    with torch.no_grad():
        reference = StepOptions().logits(model, slow, fast)
        low = StepOptions(precision="bf16").logits(model, slow, fast)
    assert seen == [torch.float32, torch.bfloat16]
    assert low.dtype == torch.float32 and not torch.equal(low, reference)
    assert float((low - reference).abs().max()) < 0.05 * float(reference.abs().max()) + 0.05


def test_channels_last_gives_the_same_logits_and_gradients():
    model, slow, fast = tiny()
    loss = StepOptions().logits(model, slow, fast).square().sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    options = StepOptions(channels_last=True)
    prepared = options.prepare(model)
    conv = next(p for p in prepared.parameters() if p.dim() == 5 and p.shape[1] > 1)
    assert conv.is_contiguous(memory_format=torch.channels_last_3d)
    loss_cl = options.logits(prepared, slow, fast).square().sum()
    grads_cl = torch.autograd.grad(loss_cl, list(prepared.parameters()))
    torch.testing.assert_close(loss_cl, loss, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_cl, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="inductor needs a C compiler")
def test_compiled_model_gives_the_eager_logits():
    model, slow, fast = tiny()
    with torch.no_grad():
        reference = StepOptions().logits(model, slow, fast)
        options = StepOptions(compile=True)
        compiled = options.prepare(model)
        assert compiled is not model and set(map(id, compiled.parameters())) == set(map(id, model.parameters()))
        torch.testing.assert_close(options.logits(compiled, slow, fast), reference, rtol=1e-4, atol=1e-4)


def test_bad_step_settings_are_named():
    with pytest.raises(ClipflowError, match="train.precision must be one of fp32, bf16, not 'fp16'"):
        StepOptions(precision="fp16")
    with pytest.raises(ClipflowError, match=r"train.precision: 'fp16' is not one of \['fp32', 'bf16'\]"):
        load_recipe("slowfast_tiny_synthetic", {"train": {"precision": "fp16"}})
    assert StepOptions.from_recipe(load_recipe("slowfast_tiny_synthetic")) == StepOptions()


@pytest.mark.parametrize(("precision", "channels_last"), [("fp32", False), ("bf16", True)])
def test_the_timed_step_runs_as_the_trainers_step(monkeypatch, precision, channels_last):
    """The step the link check predicts with and the loader is sized by (clipflow.models.step_timing) is the
    trainer's: under the recipe's precision and in its memory layout (compile aside: see that module)."""
    from clipflow.models import step_timing

    seen: list[tuple] = []
    build = step_timing._model

    def watched(recipe):
        model = build(recipe)
        last = torch.channels_last_3d
        model.register_forward_pre_hook(lambda _m, args: seen.append((
            torch.is_autocast_enabled("cpu"), all(x.is_contiguous(memory_format=last) for x in args),
            model.fast_stem.conv.weight.is_contiguous(memory_format=last))))  # fmt: skip
        return model

    monkeypatch.setattr(step_timing, "_model", watched)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    recipe = load_recipe("slowfast_tiny_synthetic", {"train": {"batch_size": 2, "precision": precision,
                                                               "channels_last": channels_last}})  # fmt: skip
    assert step_timing.time_step(recipe, bound_s=0.0) > 0
    assert seen and set(seen) == {(precision == "bf16", channels_last, channels_last)}
