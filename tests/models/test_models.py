"""Models by name: the published SlowFast sizes and inputs, torchvision's video models, GluonCV's I3D,
the MXNet documents' CIFAR-10 image models, `models info`."""

import json

import pytest
import torch
import torchvision.models
from helpers import clipflow, clipflow_here

from clipflow.errors import ClipflowError
from clipflow.models.builder import OnePathway, build_model, count_parameters, model_info
from clipflow.models.cards import CARDS, MODEL_NAMES, is_image_model
from clipflow.models.cifar import vgg11
from clipflow.recipe import load_recipe

TORCHVISION = ["r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v2_s", "swin3d_t"]
IMAGE_MODELS = ["resnet18_v1", "vgg11", "cifar_resnext110"]


def meta_model(name: str, num_classes: int) -> torch.nn.Module:
    with torch.device("meta"):
        return build_model({"name": name, "num_classes": num_classes})


def gluon_count(model: torch.nn.Module) -> int:
    """Gluon's count (``collect_params``): the weights and BatchNorm's running means and variances."""
    stats = sum(b.numel() for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var")))
    return count_parameters(model)[0] + stats


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
    side = CARDS[name].size
    if is_image_model(name):
        assert info["inputs"] == [[1, 3, side, side]]
    else:
        assert all(len(shape) == 5 and shape[:2] == [1, 3] and shape[3:] == [side, side] for shape in info["inputs"])
    assert info["parameters"] == count_parameters(build_model({"name": name, "num_classes": 7}))[0]


def test_i3d_resnet50_v1_has_the_published_size():
    """open-mmlab/mmaction2 configs/recognition/i3d/metafile.yml, i3d_r50_32x2x1_100e_8xb8_kinetics400_rgb:
    ``Parameters: 28043472``, the network GluonCV's i3d_resnet.py was borrowed from (5x7x7 stem, the same
    inflate pattern, 400 classes). By hand from GluonCV's layer shapes: torchvision's published ResNet-50,
    25,557,032, less its 1000-way fc (2,049,000), plus a 400-way one (819,600), plus 4 x 9,408 for the
    5-frame stem, plus two more taps for each 3x1x1 conv1: twice their 1x1 weights, which sum per stage to
    36,864, 98,304, 655,360 and 1,048,576."""
    published = torchvision.models.get_model_weights("resnet50").IMAGENET1K_V1.meta["num_params"]
    by_hand = published - 2_049_000 + 819_600 + 4 * 9_408 + 2 * (36_864 + 98_304 + 655_360 + 1_048_576)
    total, trainable = count_parameters(meta_model("i3d_resnet50_v1", 400))
    assert total == trainable == by_hand == 28_043_472


def test_i3d_takes_32_frames_down_to_4_and_reads_the_fast_clip():
    """GluonCV's time strides: 2 in the stem, 2 in its max pool, 2 in the pool after stage 1."""
    model = meta_model("i3d_resnet50_v1", 400).eval()
    assert isinstance(model, OnePathway) and not is_image_model("i3d_resnet50_v1")
    seen = []
    model.net.stages[3].register_forward_hook(lambda m, i, out: seen.append(list(out.shape)))
    with torch.no_grad():
        assert model(torch.empty(0, device="meta"), torch.empty(1, 3, 32, 224, 224, device="meta")).shape == (1, 400)
    assert seen == [[1, 2048, 4, 7, 7]]
    assert sum(isinstance(m, torch.nn.Dropout) and m.p == 0.5 for m in model.modules()) == 1
    real = build_model({"name": "i3d_resnet50_v1", "num_classes": 5}).eval()
    with torch.no_grad():
        out = real(torch.randn(1, 3, 2, 8, 8), torch.randn(1, 3, 8, 64, 64))
    assert out.shape == (1, 5) and torch.isfinite(out).all()


def test_resnet18_v1_is_the_gluon_model_zoo_network():
    """apache/mxnet docs/api/python/gluon/model_zoo.md: resnet18_v1, 11,699,112 parameters (1000 classes;
    Gluon counts BatchNorm's 9,600 running statistics). The distributed-training tutorial
    (example/distributed_training/cifar10_dist.py) builds ``vision.resnet18_v1()`` and keeps those 1000
    outputs; with 10 the fc loses 990 x 513 weights: 11,181,642. Without the running statistics the count is
    torchvision's published ResNet-18, the same layers."""
    assert gluon_count(meta_model("resnet18_v1", 1000)) == 11_699_112
    published = torchvision.models.get_model_weights("resnet18").IMAGENET1K_V1.meta["num_params"]
    assert count_parameters(meta_model("resnet18_v1", 1000)) == (published, published)
    assert published - 990 * 513 == 11_181_642
    assert count_parameters(meta_model("resnet18_v1", 10)) == (11_181_642, 11_181_642)


def test_vgg11_is_the_gluon_model_zoo_network():
    """apache/mxnet docs/api/python/gluon/model_zoo.md: vgg11, 132,863,336 parameters at ImageNet's 224 x 224
    and 1000 classes. Gluon infers the first dense layer's inputs, so on CIFAR-10's 32 x 32 it reads
    512 (not 25,088) values: by hand, 9,220,480 in the convolutions + 2,101,248 + 16,781,312 + 40,970 in the
    dense layers = 28,144,010 for image_classification.py --dataset cifar10 --model vgg11."""
    with torch.device("meta"):
        imagenet = vgg11(1000, image_size=224)
    assert gluon_count(imagenet) == count_parameters(imagenet)[0] == 132_863_336
    assert count_parameters(meta_model("vgg11", 10)) == (28_144_010, 28_144_010)
    assert 132_863_336 - (25_088 - 512) * 4096 - 990 * 4097 == 28_144_010


def test_cifar_resnext110_is_the_mxnet_example_symbol():
    """apache/mxnet example/image-classification/symbols/resnext.py with train_cifar10.py's num_layers 110,
    counted by hand from its layer shapes (no table publishes it): bn_data 3 + 3; conv0 432; per stage the
    first unit (with its projection) and 17 more: 4,960 + 17 x 4,672; 14,528 + 17 x 18,560;
    57,728 + 17 x 73,984; fc1 650: 1,730,976 arguments, of which bn_data's 3 scales stay at 1
    (fix_gamma=True). He et al. (2016), Table 6, give ResNet-110 on CIFAR-10 as 1.7M."""
    by_hand = 6 + 432 + 4_960 + 17 * 4_672 + 14_528 + 17 * 18_560 + 57_728 + 17 * 73_984 + 650
    total, trainable = count_parameters(meta_model("cifar_resnext110", 10))
    assert total == by_hand == 1_730_976 and trainable == total - 3
    assert round(total / 1e6, 1) == 1.7


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_image_models_are_plain_modules_called_with_images(name):
    assert is_image_model(name) and CARDS[name].frames == ()
    model = build_model({"name": name, "num_classes": 10}).eval()
    assert not isinstance(model, OnePathway)
    with torch.no_grad():
        for side in {32, CARDS[name].size}:
            out = model(torch.randn(2, 3, side, side))
            assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_only_image_models_are_image_models():
    assert [n for n in MODEL_NAMES if is_image_model(n)] == IMAGE_MODELS
    with pytest.raises(ClipflowError, match="unknown model 'lenet'"):
        is_image_model("lenet")


def test_models_info_prints_the_counts_and_shapes_as_json():
    info = json.loads(clipflow("models", "info", "slowfast_4x16_resnet50", "--num-classes", "400").stdout)
    assert info["inputs"] == [[1, 3, 4, 224, 224], [1, 3, 32, 224, 224]] and info["output"] == [1, 400]
    assert abs(info["trainable"] / 1e6 - 34.48) < 0.01 and info["parameters"] == info["trainable"]


def test_models_info_prints_an_image_models_one_input():
    info = json.loads(clipflow("models", "info", "resnet18_v1", "--num-classes", "10").stdout)
    assert info["inputs"] == [[1, 3, 32, 32]] and info["output"] == [1, 10]
    assert info["parameters"] == info["trainable"] == 11_181_642


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
    with torch.no_grad():  # exact: with the slow input unread, both calls are the same forward on the same input
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
        ({"name": "i3d_resnet50_v1", "num_classes": 4, "dropout": 0.2}, "model.dropout is a SlowFast setting; i3d_"),
        ({"name": "i3d_resnet50_v1", "num_classes": 1.5}, "model.num_classes must be an integer >= 1, got 1.5"),
        ({"name": "vgg11", "num_classes": 0}, "model.num_classes must be an integer >= 1, got 0"),
        ({"name": "vgg11", "num_classes": 10, "batch_norm": True}, "model.batch_norm is not a setting of vgg11"),
        ({"name": "resnet18_v1", "num_classes": 10, "depth": 34}, "model.depth is a SlowFast setting; resnet18_v1"),
        ({"name": "cifar_resnext110", "num_classes": 10, "num_layers": 164}, "model.num_layers is not a setting of"),
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
        (["info", "r3d_18", "--num-classes", "0"], "argument --num-classes: '0' is not a whole number >= 1"),
        (["info", "vgg11", "--num-classes", "-3"], "argument --num-classes: '-3' is not a whole number >= 1"),
        (["import", "x.params"], "models import needs --from, --model, --out: clipflow models import FILE --from"),
        (
            ["import", "x.params", "--from", "caffe", "--model", "slowfast_8x8_resnet50", "--out", "w.pt"],
            "--from 'caffe' is not a known source; give one of gluoncv, pyslowfast, pytorchvideo",
        ),
        (
            ["import", "x.params", "--from", "pytorchvideo", "--model", "slowfast_8x8_resnet101", "--out", "w.pt"],
            "--model slowfast_8x8_resnet101: pytorchvideo has no such model; it has slowfast_8x8_resnet50",
        ),
        (
            ["import", "gone.params", "--from", "gluoncv", "--model", "i3d_resnet50_v1", "--out", "w.pt"],
            "gone.params does not exist; give the gluoncv checkpoint to import",
        ),
    ],
)
def test_models_command_names_a_bad_argument(args, message, capsys):
    done = clipflow_here(capsys, "models", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
