"""The SlowFast builder: the published sizes, and the tiny default from the same code."""

import pytest
import torch

from clipflow.errors import ClipflowError
from clipflow.models import build_model, count_parameters
from clipflow.recipe import load_recipe


@pytest.mark.parametrize("name, millions", [("slowfast_4x16_resnet50", 34.48), ("slowfast_8x8_resnet50", 34.57)])
def test_published_parameter_counts(name, millions):
    total, trainable = count_parameters(build_model({"name": name, "num_classes": 400}))
    assert total == trainable
    assert abs(trainable / 1e6 - millions) < 0.01


def test_tiny_default_is_a_slowfast_with_laterals():
    recipe = load_recipe("slowfast_tiny_synthetic")
    model = build_model(recipe["model"])
    assert type(model).__name__ == "SlowFast"
    assert len(model.fuses) == 3 and model.spec.alpha == 4 and model.spec.beta_inv == 8
    slow = torch.randn(2, 3, 4, 64, 64)
    fast = torch.randn(2, 3, 16, 64, 64)
    assert model(slow, fast).shape == (2, 8)


def test_4x16_output_shape():
    model = build_model({"name": "slowfast_4x16_resnet50", "num_classes": 400}).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 4, 96, 96), torch.randn(1, 3, 16, 96, 96))
    assert out.shape == (1, 400)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"name": "resnet9000", "num_classes": 4}, "unknown model 'resnet9000'"),
        ({"name": "slowfast", "num_classes": 4, "depth": 34}, "model.depth 34"),
        ({"name": "slowfast", "num_classes": 4, "depth": [1, 1, 1]}, "4 positive block counts"),
    ],
)
def test_bad_model_settings(settings, message):
    with pytest.raises(ClipflowError, match=message):
        build_model(settings)
