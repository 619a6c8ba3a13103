"""Importing PySlowFast's and PyTorchVideo's SlowFast checkpoints (clipflow.models.imports.pyslowfast,
.pytorchvideo): the reference, built in its own code in its own venv (tests/reference_envs.py) with random
weights, writes its checkpoint in its own format and its output on one clip; clipflow's network with the imported
weights must give the same output on the same clip. Then the refusals: a pickle that asks to run code, a truncated
file, a checkpoint of another depth.

The clips are small (64x64, 16 fast frames: 4 or 2 slow ones) to keep the module's CPU time low; the reference's
head pools the whole clip, as clipflow's does (PySlowFast's AvgPool3d is sized from the config's frames and crop).
"""

from __future__ import annotations

import pickle
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO
from reference_envs import ReferenceUnavailable, reference_python

from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model
from clipflow.models.imports import pyslowfast, pytorchvideo
from clipflow.models.imports.convert import convert

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

HERE = REPO / "tests" / "models"
FAST_FRAMES, SIDE = 16, 64
ALPHA = {"slowfast_4x16_resnet50": 8, "slowfast_8x8_resnet50": 4, "slowfast_8x8_resnet101": 4}

# Tolerance on the logits (before PySlowFast's softmax; up to ~40 here). Measured on this clip: 4e-6 (R50, both
# sources) to 9e-6 (R101, .pyth and .pkl) absolute, 1.5e-5 with 32 frames: float32 sums taken in another order (the
# reference's head projects channel-last after an AvgPool3d, clipflow's after a mean). A wrong tensor in any of the
# 100+ layers moves them by far more than 1e-3.
ATOL, RTOL = 1e-3, 1e-4


def _reference(requirements: str, check: str) -> Path:
    try:
        return reference_python(HERE / requirements, check, see_torch=True)
    except ReferenceUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """One clip: fast.npy (1, 3, 16, 64, 64) and its slow frames for each alpha, slow{alpha}.npy."""
    folder = tmp_path_factory.mktemp("clips")
    fast = np.random.default_rng(0).standard_normal((1, 3, FAST_FRAMES, SIDE, SIDE)).astype(np.float32)
    np.save(folder / "fast.npy", fast)
    for alpha in set(ALPHA.values()):
        np.save(folder / f"slow{alpha}.npy", np.ascontiguousarray(fast[:, :, ::alpha]))
    return folder


def _run(python: Path, script: str, *args: object) -> None:
    done = subprocess.run(
        [str(python), str(HERE / script), *map(str, args)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _clipflow_logits(tensors: dict, module, model: str, path: Path, clips: Path) -> np.ndarray:
    converted = convert(tensors, module, model, path)
    net = build_model({"name": model, "num_classes": converted.num_classes})
    net.load_state_dict(converted.state, strict=True)
    net.eval()
    slow = torch.from_numpy(np.load(clips / f"slow{ALPHA[model]}.npy"))
    fast = torch.from_numpy(np.load(clips / "fast.npy"))
    with torch.no_grad():
        return net(slow, fast).numpy()


def _compare(ours: np.ndarray, reference: np.ndarray, what: str) -> None:
    diff = float(np.abs(ours - reference).max())
    print(f"{what}: max |logit difference| {diff:.3g} (logits up to {np.abs(reference).max():.3g})")
    np.testing.assert_allclose(ours, reference, atol=ATOL, rtol=RTOL, err_msg=what)


@pytest.fixture(scope="module")
def pyslowfast_python() -> Path:
    return _reference("pyslowfast_requirements.txt", "import slowfast.utils.checkpoint, fvcore")


# What PySlowFast writes, in one process (its imports paid once): each model's checkpoint in the form it is
# published in (the Kinetics R50s' later .pyth; the R101, c2/SLOWFAST_8x8_R101_101_101, as a Caffe2 .pkl).
FORMS = {"slowfast_4x16_resnet50": "pyth", "slowfast_8x8_resnet50": "pyth", "slowfast_8x8_resnet101": "pkl"}


@pytest.fixture(scope="module")
def pyslowfast_runs(pyslowfast_python, clips, tmp_path_factory) -> dict[str, Path]:
    """Model name -> the folder where PySlowFast wrote its checkpoint (model.pyth or model.pkl) and outputs."""
    made = {model: tmp_path_factory.mktemp(model) for model in FORMS}
    runs = [arg for model, out in made.items()
            for arg in ("--model", model, clips / f"slow{ALPHA[model]}.npy", out, FORMS[model])]  # fmt: skip
    _run(pyslowfast_python, "pyslowfast_reference.py", clips / "fast.npy", *runs)
    return made


@pytest.mark.parametrize("model", list(FORMS))
def test_pyslowfast_checkpoint_gives_pyslowfast_logits(pyslowfast_runs, clips, model):
    """Compared before the softmax PySlowFast's head applies in eval mode (a hook on head.projection): the logits
    show a difference the softmax would squash; the softmax of ours is then PySlowFast's output as well."""
    out, file = pyslowfast_runs[model], f"model.{FORMS[model]}"
    started = time.process_time()
    tensors = pyslowfast.read(out / file)
    ours = _clipflow_logits(tensors, pyslowfast, model, out / file, clips)
    _compare(ours, np.load(out / "logits.npy"), f"{model} {file}")
    np.testing.assert_allclose(torch.softmax(torch.from_numpy(ours), 1).numpy(), np.load(out / "probs.npy"), atol=1e-5)
    print(f"clipflow side: {time.process_time() - started:.1f} s CPU")


def test_caffe2_solver_blobs_are_skipped_not_hidden(pyslowfast_runs):
    out = pyslowfast_runs["slowfast_8x8_resnet101"]
    converted = convert(pyslowfast.read(out / "model.pkl"), pyslowfast, "slowfast_8x8_resnet101", out / "model.pkl")
    assert set(converted.skipped) == {"lr", "model_iter", "conv1_w_momentum", "pred_w_momentum", "pred_b_momentum"}


def test_pytorchvideo_slowfast_r50_gives_pytorchvideo_logits(clips, tmp_path):
    """The hub's slowfast_r50 is the 8x8 R50 (fusion stride 4, kernel 7): clipflow's slowfast_8x8_resnet50."""
    python = _reference("pytorchvideo_requirements.txt", "import pytorchvideo.models.hub")
    _run(python, "pytorchvideo_reference.py", clips / "slow4.npy", clips / "fast.npy", tmp_path)
    path = tmp_path / "slowfast_r50.pyth"
    model = next(name for name, ref in pytorchvideo.MODELS.items() if ref == "slowfast_r50")
    ours = _clipflow_logits(pytorchvideo.read(path), pytorchvideo, model, path, clips)
    _compare(ours, np.load(tmp_path / "logits.npy"), f"pytorchvideo slowfast_r50 as {model}")


def test_pickle_that_asks_to_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            import os

            return os.system, (f"touch {marker}",)

    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"blobs": {"conv1_w": Payload()}}, protocol=2))
    with pytest.raises(ClipflowError, match=r"evil\.pkl.*(posix|os)\.system"):
        pyslowfast.read(path)
    assert not marker.exists()


class _Python2Pickler(pickle.Pickler):
    """Pickles numpy arrays as Python 2 did: their bytes as a (latin1) string, no ``_codecs.encode``."""

    def reducer_override(self, obj):
        if not isinstance(obj, np.ndarray):
            return NotImplemented
        rebuild, (cls, shape, _), (version, dims, dtype, fortran, data) = obj.__reduce__()
        return rebuild, (cls, shape, "b"), (version, dims, dtype, fortran, data.decode("latin1"))


def test_numpy_blobs_of_a_python2_pickle_read(tmp_path):
    """Caffe2 (Python 2) wrote its checkpoints with pickle protocol 2, arrays' bytes as strings: read as latin1."""
    blobs = {"pred_b": np.arange(4, dtype=np.float32), "model_iter": np.array([7], dtype=np.int64)}
    path = tmp_path / "small.pkl"
    with open(path, "wb") as f:
        _Python2Pickler(f, protocol=2).dump({"blobs": blobs})
    assert b"_codecs" not in path.read_bytes()
    read = pyslowfast.read(path)
    assert read.keys() == blobs.keys() and all(np.array_equal(read[k], blobs[k]) for k in blobs)


def test_truncated_pyth_is_refused(tmp_path):
    path = tmp_path / "cut.pyth"
    torch.save({"model_state": {"head.projection.weight": torch.ones(400, 2304)}, "epoch": 1}, path)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(ClipflowError, match=r"cut\.pyth could not be read"):
        pyslowfast.read(path)


def test_checkpoint_of_another_depth_is_refused(pyslowfast_runs):
    """A 4x16 R50 checkpoint (fusion kernel 5, as the 8x8 R101's) imported as the R101 preset: the blocks R101 has
    beyond R50's are named as missing; the R101 one as the 4x16 R50 preset: its extra blocks are named; as the 8x8
    R50 preset: its fusion kernel of 5 is refused against the preset's 7, both shapes named."""
    r50 = pyslowfast_runs["slowfast_4x16_resnet50"] / "model.pyth"
    with pytest.raises(
        ClipflowError, match=r"leaves \d+ tensors of slowfast_8x8_resnet101 unfilled \(slow_stages\.2\.6"
    ):
        convert(pyslowfast.read(r50), pyslowfast, "slowfast_8x8_resnet101", r50)
    r101 = pyslowfast_runs["slowfast_8x8_resnet101"] / "model.pkl"
    with pytest.raises(ClipflowError, match=r"res4_6_branch2a_w maps to slow_stages\.2\.6\.a\.weight, which "
                                            r"slowfast_4x16_resnet50 does not have"):  # fmt: skip
        convert(pyslowfast.read(r101), pyslowfast, "slowfast_4x16_resnet50", r101)
    with pytest.raises(ClipflowError, match=r"t_pool1_subsample_w has shape \[16, 8, 5, 1, 1\], but fuse_stem\.conv"
                                            r"\.weight of slowfast_8x8_resnet50 has \[16, 8, 7, 1, 1\]"):  # fmt: skip
        convert(pyslowfast.read(r101), pyslowfast, "slowfast_8x8_resnet50", r101)
