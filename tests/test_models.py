"""Models by name: the published SlowFast sizes and inputs, torchvision's video models, `models info`."""

import json

import pytest
import torch
import torchvision.models
from conftest import clipflow

from clipflow.errors import ClipflowError
from clipflow.models import MODEL_NAMES, build_model, count_parameters, model_info
from clipflow.recipe import load_recipe

TORCHVISION = ["r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v2_s", "swin3d_t"]


@pytest.mark.parametrize("name, millions", [("slowfast_4x16_resnet50", 34.48), ("slowfast_8x8_resnet50", 34.57)])
def test_published_parameter_counts(name, millions):
    total, trainable = count_parameters(build_model({"name": name, "num_classes": 400}))
    assert total == trainable
    assert abs(trainable / 1e6 - millions) < 0.01


@pytest.mark.parametrize("name", TORCHVISION)
def test_torchvision_models_have_the_size_of_their_published_kinetics_weights(name):
    """The count torchvision publishes with its Kinetics-400 weights (the weights themselves are not loaded)."""
    published = torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"]
    info = model_info(name, 400)
    assert info["parameters"] == info["trainable"] == published


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_gives_one_score_per_class_at_its_published_input(name):
    info = model_info(name, 7)
    assert info["name"] == name and info["output"] == [1, 7]
    assert all(shape[:2] == [1, 3] and shape[3] == shape[4] for shape in info["inputs"])
    assert info["parameters"] == count_parameters(build_model({"name": name, "num_classes": 7}))[0]


def test_models_info_prints_the_counts_and_shapes_as_json():
    info = json.loads(clipflow("models", "info", "slowfast_4x16_resnet50", "--num-classes", "400").stdout)
    assert info["inputs"] == [[1, 3, 4, 224, 224], [1, 3, 32, 224, 224]] and info["output"] == [1, 400]
    assert abs(info["trainable"] / 1e6 - 34.48) < 0.01 and info["parameters"] == info["trainable"]


@pytest.mark.parametrize(
    "name, slow, fast",
    [("slowfast_4x16_resnet50", 4, 32), ("slowfast_8x8_resnet50", 8, 32), ("slowfast_8x8_resnet101", 8, 32)],
)
def test_slowfast_presets_take_the_published_frame_counts(name, slow, fast):
    """The lateral connections stride the fast pathway by alpha onto the slow one: only the published
    alpha (8 for 4x16, 4 for 8x8, as PySlowFast's and GluonCV's configs) fits 4 + 32 or 8 + 32 frames."""
    info = model_info(name, 400)
    assert info["inputs"] == [[1, 3, slow, 224, 224], [1, 3, fast, 224, 224]] and info["output"] == [1, 400]
    model = build_model({"name": name, "num_classes": 400})
    assert model.spec.alpha == fast // slow
    other = 2 * slow if slow == 4 else slow // 2  # the other published ratio does not fit
    with torch.device("meta"), pytest.raises(RuntimeError):
        meta = build_model({"name": name, "num_classes": 400})
        meta(torch.empty(1, 3, other, 224, 224), torch.empty(1, 3, fast, 224, 224))


def test_4x16_runs_on_real_tensors():
    model = build_model({"name": "slowfast_4x16_resnet50", "num_classes": 400}).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 4, 96, 96), torch.randn(1, 3, 32, 96, 96))
    assert out.shape == (1, 400) and torch.isfinite(out).all()


def test_a_one_pathway_model_reads_the_fast_frames():
    model = build_model({"name": "r3d_18", "num_classes": 5}).eval()
    fast = torch.randn(2, 3, 8, 48, 48)
    with torch.no_grad():
        assert torch.equal(model(torch.randn(2, 3, 1, 48, 48), fast), model(torch.zeros(2, 3, 2, 48, 48), fast))
    assert model(torch.empty(0), fast).shape == (2, 5)


def test_tiny_default_is_a_slowfast_with_laterals():
    recipe = load_recipe("slowfast_tiny_synthetic")
    model = build_model(recipe["model"])
    assert type(model).__name__ == "SlowFast"
    assert len(model.fuses) == 3 and model.spec.alpha == 4 and model.spec.beta_inv == 8
    slow = torch.randn(2, 3, 4, 64, 64)
    fast = torch.randn(2, 3, 16, 64, 64)
    assert model(slow, fast).shape == (2, 8)


def test_models_list_names_them_all():
    assert clipflow("models", "list").stdout.split() == list(MODEL_NAMES)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"name": "resnet9000", "num_classes": 4}, "unknown model 'resnet9000'; known models: slowfast, "),
        ({"name": "slowfast", "num_classes": 4, "depth": 34}, "model.depth 34"),
        ({"name": "slowfast", "num_classes": 4, "depth": [1, 1, 1]}, "4 positive block counts"),
        ({"name": "slowfast", "num_classes": 0}, "model.num_classes must be an integer >= 1, got 0"),
        ({"name": "r3d_18", "num_classes": "ten"}, "model.num_classes must be an integer >= 1, got 'ten'"),
        ({"name": "r3d_18", "num_classes": 4, "alpha": 8}, "model.alpha is a SlowFast setting; r3d_18 takes only"),
    ],
)
def test_bad_model_settings(settings, message):
    with pytest.raises(ClipflowError, match=message):
        build_model(settings)


@pytest.mark.parametrize(
    "args, message",
    [
        (["info", "resnet9000"], "unknown model 'resnet9000'; known models:"),
        (["info"], "models info needs a model name"),
        (["info", "r3d_18", "--num-classes", "0"], "model.num_classes must be an integer >= 1, got 0"),
    ],
)
def test_models_command_names_a_bad_argument(args, message):
    done = clipflow("models", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
