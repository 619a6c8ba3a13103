"""`clipflow models import --from gluoncv`: GluonCV's model zoo networks, with seeded random weights, give the
same logits in clipflow after the import as in GluonCV itself (run in its own MXNet environment by
gluoncv_reference.py); the reader of MXNet's format takes its variants and refuses broken files and files of
another model with one line naming the file or the tensor.

The GluonCV environment (gluoncv-requirements.txt) is built once and cached (tests/reference_envs.py); where it
cannot be built the oracle tests skip saying why. Inputs are the published frame counts (32 fast frames and 4 or 8
slow ones, 32 frames for I3D) at 64 x 64, which keeps every layer (the smallest feature map is 2 x 2) at a fraction of
the cost of 224 x 224.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, clipflow
from reference_envs import ReferenceUnavailable, reference_python

from clipflow.checksums import sha256_of
from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model
from clipflow.models.imports import gluoncv
from clipflow.models.imports.convert import convert
from clipflow.models.imports.mxnet_params import read_params
from clipflow.models.weights import read_weights

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "gluoncv-requirements.txt"
SCRIPT = HERE / "gluoncv_reference.py"
CHECK = "import gluoncv.model_zoo, mxnet, numpy"
CLASSES, SEED, SIDE = 7, 20240607, 64
FAST_FRAMES = 32  # GluonCV's SlowFast slices its input at fast_frames, 32 in every published variant
SLOW_FRAMES = {"slowfast_4x16_resnet50": 4, "slowfast_8x8_resnet50": 8, "slowfast_8x8_resnet101": 8}

# The tolerance: both sides compute the same float32 operations (convolutions, BatchNorm with the same epsilon,
# ReLU, max and mean pools, one linear layer) in different kernels (MXNet's oneDNN, torch's), which sum in other
# orders; each sum's rounding error is about its length times 2^-24 relative to the sum's size, and the errors of
# 30-100 layers add up. Measured (64 x 64, these weights): the largest |difference| is 4e-7 to 8e-7 of the largest
# |logit| for all four networks. 1e-5 of it leaves a margin of ten over that, and is far below what any mapping
# mistake gives (a BatchNorm's statistics swapped, a block out of place, the pathways' frames swapped change the
# logits by a good part of their own size).
RELATIVE_TOLERANCE = 1e-5


@pytest.fixture(scope="session")
def gluoncv_python() -> Path:
    try:
        return reference_python(REQUIREMENTS, CHECK)
    except ReferenceUnavailable as why:
        pytest.skip(f"no GluonCV environment: {why}")


@pytest.fixture(scope="session")
def reference(gluoncv_python, tmp_path_factory):
    """A function: clipflow's model name -> (the clip, GluonCV's .params of it, GluonCV's logits of the clip), every
    model made at its first call by one run of gluoncv_reference.py (MXNet and GluonCV imported once)."""
    made: dict[str, tuple[np.ndarray, Path, Path]] = {}
    for model in gluoncv.MODELS:
        work = tmp_path_factory.mktemp(model)
        frames = FAST_FRAMES + SLOW_FRAMES.get(model, 0)
        clip = np.random.default_rng(SEED).normal(size=(1, 3, frames, SIDE, SIDE)).astype(np.float32)
        np.save(work / "clip.npy", clip)
        made[model] = clip, work / "model.params", work / "logits.npy"

    def run(model: str) -> tuple[np.ndarray, Path, np.ndarray]:
        clip, params, logits = made[model]
        if not logits.exists():
            argv = [str(gluoncv_python), str(SCRIPT)]
            for name, (_, params_of, logits_of) in made.items():
                argv += [gluoncv.MODELS[name], str(CLASSES), str(SEED), str(params_of.with_name("clip.npy")),
                         str(params_of), str(logits_of)]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        return clip, params, np.load(logits)

    return run


def clipflow_logits(model: str, params: Path, clip: np.ndarray) -> np.ndarray:
    """clipflow's logits of ``clip`` (GluonCV's one tensor: for SlowFast the fast frames, then the slow ones) with
    the weights imported from ``params``."""
    if model == "i3d_resnet50_v1":  # the smallest file goes the user's way: the command, its file, read_weights
        out = params.with_name("imported.pt")
        done = clipflow("models", "import", str(params), "--from", "gluoncv", "--model", model, "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{out}: {model}, {CLASSES} classes, ")
        weights = read_weights(out)
        assert weights.model == {"name": model, "num_classes": CLASSES}
        p = weights.provenance
        assert (p["source"], p["file"], p["sha256"], p["skipped"]) == ("gluoncv", str(params), sha256_of(params), {})
        assert set(p["name_map"]) == {k for k in weights.state if not k.endswith("num_batches_tracked")}
        state = weights.state
    else:
        converted = convert(gluoncv.read(params), gluoncv, model, params)
        assert converted.num_classes == CLASSES and converted.skipped == {}
        state = converted.state
    with torch.device("meta"):  # no random initialisation to throw away: the imported tensors are assigned
        net = build_model({"name": model, "num_classes": CLASSES})
    net.load_state_dict(state, strict=True, assign=True)
    frames = torch.from_numpy(clip)
    with torch.no_grad():
        if model in SLOW_FRAMES:
            return net.eval()(frames[:, :, FAST_FRAMES:], frames[:, :, :FAST_FRAMES]).numpy()
        return net.eval()(frames, frames).numpy()  # I3D reads the second (fast) pathway's frames only


@pytest.mark.parametrize("model", list(gluoncv.MODELS))
def test_imported_weights_give_gluoncvs_logits(model, reference):
    clip, params, expected = reference(model)
    started = time.perf_counter()
    logits = clipflow_logits(model, params, clip)
    scale = float(np.abs(expected).max())
    difference = float(np.abs(logits - expected).max())
    print(f"{model}: max|logit| {scale:.4g}, max|difference| {difference:.3g} ({difference / scale:.2g} of it), "
          f"clipflow side {time.perf_counter() - started:.1f} s")  # fmt: skip
    assert logits.shape == expected.shape == (1, CLASSES)
    assert scale > 1e-3  # the weights make the network say something
    assert difference <= RELATIVE_TOLERANCE * scale


# --- MXNet's format: files written here byte by byte, as NDArray::Save and mx.nd.save lay them out ------------------


def ndarray_bytes(array: np.ndarray, magic: int = 0xF993FAC9, storage: int = 0, flag: int | None = None) -> bytes:
    """One array as MXNet saves it (V2 by default; V3 has the same layout)."""
    flags = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2, np.dtype(np.int64): 6}
    head = np.array([magic], "<u4").tobytes() + np.array([storage, array.ndim], "<i4").tobytes()
    head += np.array(array.shape, "<i8").tobytes()
    head += np.array([1, 0, flags[array.dtype] if flag is None else flag], "<i4").tobytes()
    return head + np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()


def params_bytes(arrays: dict[str, bytes]) -> bytes:
    """An NDArray list (magic 0x112) of already-saved arrays and their names."""
    out = np.array([0x112, 0, len(arrays)], "<u8").tobytes() + b"".join(arrays.values())
    out += np.array([len(arrays)], "<u8").tobytes()
    for name in arrays:
        out += np.array([len(name.encode())], "<u8").tobytes() + name.encode()
    return out


def test_the_reader_takes_mxnets_variants(tmp_path):
    weight = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    arrays = {
        "arg:fc.weight": ndarray_bytes(weight),
        "aux:bn.running_var": ndarray_bytes(np.array([0.5, 2.0], np.float64), magic=0xF993FACA),
        "step": ndarray_bytes(np.array([7], np.int64), magic=0xF993FAC8)[:4] + ndarray_bytes(np.array([7]))[8:],
        "half": ndarray_bytes(np.array([1.5], np.float16)),
    }
    path = tmp_path / "mixed.params"
    path.write_bytes(params_bytes(arrays))
    read = read_params(path)
    assert list(read) == ["fc.weight", "bn.running_var", "step", "half"]
    np.testing.assert_array_equal(read["fc.weight"], weight)
    assert read["bn.running_var"].dtype == np.float64 and read["bn.running_var"].tolist() == [0.5, 2.0]
    assert read["step"].tolist() == [7] and read["half"].dtype == np.float16


def refusal(path: Path, model: str = "slowfast_4x16_resnet50") -> str:
    with pytest.raises(ClipflowError) as refused:
        convert(gluoncv.read(path), gluoncv, model, path)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_broken_files_are_refused_with_one_line_naming_the_file(tmp_path):
    good = params_bytes({"fc.weight": ndarray_bytes(np.ones((3, 4), np.float32))})
    cases = {
        "notes.params": (b"these are not weights\n" * 4, "magic of an MXNet NDArray list"),
        "cut.params": (good[:-30], "truncated"),
        "sparse.params": (params_bytes({"fc.weight": ndarray_bytes(np.ones(3, np.float32), storage=1)}), "row-sparse"),
        "bf16.params": (params_bytes({"fc.weight": ndarray_bytes(np.ones(3, np.float32), flag=12)}), "bfloat16"),
        "list.params": (good[: -(8 + 8 + len("fc.weight"))] + np.array([0], "<u8").tobytes(), "unnamed"),
    }
    for name, (content, reason) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        message = refusal(path)
        assert str(path) in message and reason in message, message


def test_a_file_of_another_model_is_refused_naming_the_tensor(reference, tmp_path):
    _, i3d_params, _ = reference("i3d_resnet50_v1")
    message = refusal(i3d_params, "slowfast_4x16_resnet50")
    assert "first_stage.0.weight" in message and "slowfast_4x16_resnet50_kinetics400" in message, message
    # the same through the command line: one clipflow: error: line, no traceback
    done = clipflow("models", "import", str(i3d_params), "--from", "gluoncv", "--model", "slowfast_8x8_resnet50",
                    "--out", str(tmp_path / "out.pt"))  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("clipflow: error: ")]
    assert len(errors) == 1 and "first_stage.0.weight" in errors[0], done.stderr


def test_a_classifier_of_another_width_is_refused_with_both_shapes(tmp_path):
    """A classifier that reads 2048 features (a slow pathway's alone) where clipflow's SlowFast reads 2304: the
    shape check names the file, the tensor and both shapes."""
    path = tmp_path / "lateral.params"
    path.write_bytes(params_bytes({"fc.weight": ndarray_bytes(np.ones((CLASSES, 2048), np.float32))}))
    message = refusal(path)
    assert str(path) in message and "fc.weight" in message and "[7, 2048]" in message and "[7, 2304]" in message


def test_every_gluoncv_name_has_one_place_and_repo_is_the_root():
    assert REPO.joinpath("tests", "models", SCRIPT.name).is_file()
    assert gluoncv.rename("fast_res3.0.downsample.1.running_var", "slowfast_8x8_resnet101") == (
        "fast_stages.1.0.shortcut.1.running_var"
    )
    assert gluoncv.rename("slowfast0_lateral_res4_batchnorm0_gamma", "slowfast_8x8_resnet50") == "fuses.2.bn.weight"
    assert gluoncv.rename("res_layers.2.4.bottleneck.4.beta", "i3d_resnet50_v1") == "net.stages.2.4.bn2.bias"
    assert gluoncv.rename("layer4_downsample_batchnorm0_running_mean", "i3d_resnet50_v1") == (
        "net.stages.3.0.shortcut.1.running_mean"
    )
    with pytest.raises(ClipflowError, match="slow_res2.0.conv1.gamma"):
        gluoncv.rename("slow_res2.0.conv1.gamma", "slowfast_4x16_resnet50")
