"""The shipped recipes: each loads through the schema, its model takes its data's clips, and the
Kinetics ones carry the published settings' scaling and their references."""

from pathlib import Path

import pytest
import torch

from clipflow.errors import ClipflowError
from clipflow.models import build_model
from clipflow.recipe import RECIPES_DIR, load_recipe
from clipflow.train.schedule import scaled_lr

RECIPES = sorted(p.stem for p in Path(RECIPES_DIR).glob("*.yaml"))
KINETICS = [name for name in RECIPES if name.endswith("_kinetics400")]
SLOWFAST_KINETICS = [name for name in KINETICS if name.startswith("slowfast_")]


def test_the_three_published_slowfast_recipes_are_shipped():
    assert {
        "slowfast_4x16_resnet50_kinetics400",
        "slowfast_8x8_resnet50_kinetics400",
        "slowfast_8x8_resnet101_kinetics400",
    } <= set(KINETICS)


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_model_takes_the_clips_its_data_section_makes(name):
    recipe = load_recipe(name)
    d, classes = recipe["data"], recipe["model"]["num_classes"]
    slow_frames = d["new_length"] * d["num_segments"] // d["slow_temporal_stride"]
    fast_frames = d["new_length"] * d["num_segments"] // d["fast_temporal_stride"]
    size = d["input_size"]
    with torch.device("meta"), torch.no_grad():
        model = build_model(recipe["model"]).eval()
        out = model(torch.empty(2, 3, slow_frames, size, size), torch.empty(2, 3, fast_frames, size, size))
    assert tuple(out.shape) == (2, classes)


@pytest.mark.parametrize("name", SLOWFAST_KINETICS)
def test_kinetics_recipes_scale_to_the_tutorials_lr_and_name_their_reference(name):
    t = load_recipe(name)["train"]
    assert scaled_lr(t["base_lr"], t["base_batch"], 4 * 8 * t["batch_size"]) == pytest.approx(0.4)
    assert (t["epochs"], t["warmup_epochs"], t["warmup_lr"], t["lr_mode"]) == (196, 34, 0.01, "cosine")
    reference = load_recipe(name)["reference"]
    for ref in [reference, *reference.get("others", [])]:
        assert 70 < ref["top1"] < 80 and ref["source"] and ref["protocol"]


def test_a_stride_ratio_that_is_not_the_models_alpha_is_refused():
    with pytest.raises(ClipflowError, match=r"data.slow_temporal_stride 8 / data.fast_temporal_stride 2 must be "
                       r"model slowfast_4x16_resnet50's alpha 8"):  # fmt: skip
        load_recipe("slowfast_4x16_resnet50_kinetics400", {"data": {"slow_temporal_stride": 8}})
    with pytest.raises(ClipflowError, match="alpha 4"):
        load_recipe("slowfast_tiny_synthetic", {"model": {"alpha": 4}, "data": {"slow_temporal_stride": 16}})


def test_a_reference_without_its_source_is_refused():
    with pytest.raises(ClipflowError, match=r"reference.others.0: 'source' is a required property"):
        load_recipe("slowfast_8x8_resnet50_kinetics400", {"reference": {"others": [{"top1": 77.0, "protocol": "x"}]}})


def test_the_r2plus1d_recipe_carries_torchvisions_published_accuracy_and_input():
    import torchvision.models

    weights = torchvision.models.get_model_weights("r2plus1d_18").DEFAULT
    recipe = load_recipe("r2plus1d_18_kinetics400")
    published = weights.meta["_metrics"]["Kinetics-400"]
    assert (recipe["reference"]["top1"], recipe["reference"]["top5"]) == (published["acc@1"], published["acc@5"])
    d = recipe["data"]
    preset = weights.transforms()
    assert [d["new_height"], d["new_width"]] == list(preset.resize_size)
    assert [d["input_size"]] * 2 == list(preset.crop_size)
    assert d["mean"] == list(preset.mean) and d["std"] == list(preset.std)
    assert int(d["new_height"] * d["scale_ratios"][0]) == d["input_size"]  # a plain random crop, no resize
    assert d["new_length"] // d["fast_temporal_stride"] == 16  # clip_len 16
    t = recipe["train"]
    assert scaled_lr(t["base_lr"], t["base_batch"], 64 * t["batch_size"]) == pytest.approx(0.64)
