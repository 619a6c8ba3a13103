"""The shipped recipes: each loads through the schema, its model takes its data's clips (or images), the
Kinetics ones carry the published settings' scaling and their references, the CIFAR-10 ones their scripts'."""

from pathlib import Path

import pytest
import torch

from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model
from clipflow.recipe import RECIPES_DIR, load_recipe
from clipflow.train.schedule import scaled_lr

RECIPES = sorted(p.stem for p in Path(RECIPES_DIR).glob("*.yaml"))
KINETICS = [name for name in RECIPES if name.endswith("_kinetics400")]
SLOWFAST_KINETICS = [name for name in KINETICS if name.startswith("slowfast_")]
CIFAR = ["resnet18_cifar10", "vgg11_cifar10", "resnext_cifar10"]


def test_the_three_published_slowfast_recipes_are_shipped():
    assert {
        "slowfast_4x16_resnet50_kinetics400",
        "slowfast_8x8_resnet50_kinetics400",
        "slowfast_8x8_resnet101_kinetics400",
    } <= set(KINETICS)


@pytest.mark.parametrize("name", [n for n in RECIPES if n not in CIFAR])
def test_each_recipe_model_takes_the_clips_its_data_section_makes(name):
    recipe = load_recipe(name)
    d, classes = recipe["data"], recipe["model"].get("num_classes", 5)  # a recipe without one takes the data's
    recipe["model"].setdefault("num_classes", classes)
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


@pytest.mark.parametrize("name", CIFAR)
def test_each_cifar_recipe_model_takes_the_images_its_data_section_makes(name):
    recipe = load_recipe(name)
    size = recipe["data"]["input_size"]
    assert recipe["data"]["kind"] == "image"
    with torch.device("meta"), torch.no_grad():
        out = build_model(recipe["model"]).eval()(torch.empty(2, 3, size, size))
    assert tuple(out.shape) == (2, 10)


@pytest.mark.parametrize(
    "name, script",
    [("resnet18_cifar10", "cifar10_dist"), ("vgg11_cifar10", "gluon_image_classification"),
     ("resnext_cifar10", "train_cifar10")],
)  # fmt: skip
def test_cifar_recipes_do_to_the_images_what_their_scripts_do(name, script):
    """The recipe's data settings against an independent transcription of the script (tests/cifar_helpers.py)."""
    from cifar_helpers import RECIPE_SPECS

    from clipflow.data.cifar.transforms import ImageSpec

    ours, theirs = ImageSpec.from_recipe(load_recipe(name)), RECIPE_SPECS[script]
    assert (ours.crop_size, ours.padding, ours.pad_value, ours.random_flip) == (
        theirs.crop_size, theirs.padding, theirs.pad_value, theirs.random_flip,
    )  # fmt: skip
    assert ours.mean == pytest.approx(theirs.mean, abs=1e-12) and ours.std == pytest.approx(theirs.std, abs=1e-12)


def test_cifar_recipes_carry_their_scripts_optimizers_and_schedules():
    r18, vgg, rnx = (load_recipe(n)["train"] for n in CIFAR)
    assert (r18["optimizer"], r18["base_lr"], r18["base_batch"], r18["epochs"], r18["wd"]) == ("adam", 0.001, 512, 5, 0)
    assert (vgg["optimizer"], vgg["base_lr"] / vgg["base_batch"], vgg["momentum"], vgg["epochs"]) == (
        "sgd", 0.1 / 32, 0.9, 1)  # fmt: skip
    assert (rnx["base_lr"], rnx["epochs"], rnx["lr_decay_epoch"], rnx["lr_decay"]) == (0.05, 300, [200, 250], 0.1)
    assert load_recipe("resnet18_cifar10")["reference"]["top1"] == 68.79


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("slowfast_tiny_synthetic", {"model": {"name": "vgg11"}},
         "model vgg11 classifies images but data.kind is video; set data.kind: image"),
        ("slowfast_tiny_synthetic", {"data": {"kind": "image"}},
         "model slowfast classifies video clips but data.kind is image; set data.kind: video"),
        ("resnet18_cifar10", {"train": {"nesterov": True}},
         "train.nesterov is an SGD setting; the recipe's optimizer is adam"),
        ("vgg11_cifar10", {"train": {"optimizer": "rmsprop"}},
         "train.optimizer: 'rmsprop' is not one of ['sgd', 'adam']"),
        ("vgg11_cifar10", {"data": {"input_size": None}}, "data.input_size: None is not of type 'integer'"),
        ("vgg11_cifar10", {"data": {"input_size": 40}},
         "recipe vgg11_cifar10.yaml with overrides: data.input_size must be an integer in 1..32 for images, got 40"),
        ("vgg11_cifar10", {"data": {"padding": -1}}, "data.padding: -1 is less than the minimum of 0"),
        ("vgg11_cifar10", {"train": {"beta2": 1}}, "train.beta2: 1 is greater than or equal to the maximum of 1"),
    ],
)  # fmt: skip
def test_bad_image_and_optimizer_settings_are_named(name, overrides, message):
    with pytest.raises(ClipflowError) as err:
        load_recipe(name, overrides)
    assert message in str(err.value)
