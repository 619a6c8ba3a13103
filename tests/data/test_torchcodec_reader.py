"""clipflow.data.torchcodec_reader: ``data.decoder: torchcodec`` gives the PyAV reader's frames (same numbering, same
pixels at the displayed size, the decord path's resize at another); ``nvdec`` is refused by name where there is no
GPU; a file it cannot read is named in the other readers' words.

The videos are short cuts of forms of the test zoo (tests/data/video_zoo.py, made by Debian's ffmpeg): B-frames
in one long GOP, variable frame rate, a phone video turned a quarter, full range, 10-bit HEVC, VP9 in webm. Each
frame shows its number as 8 black or white bars in its top half.

Tolerance, as the zoo's test: at most 2 levels apart in at most 1% of the values (swscale's SIMD code is chosen by
the CPU; here no value differed). A neighbouring frame is 1 to 4 bars off (6% to 12% of the values, by 255 levels).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import video_zoo
from bad_input_helpers import bad_videos, decoder_text_in

from clipflow.data.build import build_dataset
from clipflow.data.reader import read_frames, resize_rgb
from clipflow.data.synthetic import write_video
from clipflow.data.torchcodec_reader import prepare
from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe

FORMS = {"b-frames-gop-300": 60, "vfr-mkv": 30, "rotated-90": 30, "full-range": 30, "10-bit": 30, "vp9-webm-1ms": 30}
INDICES = [29, 0, 7, 7, 3, 8, 15]  # out of order, a repeat, neighbours
RESIZED_MEAN_TOLERANCE = 3.0  # a frame's mean against the PyAV reader's resize (measured: at most 1.93 on the zoo)
NO_GPU = (
    "data.decoder nvdec decodes on a GPU (torchcodec's NVDEC): this machine has no CUDA device "
    "(torch.cuda.is_available() is false); use data.decoder pyav (or torchcodec) here"
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{form name: path} of the zoo forms above, cut to their frame count here (under 3 s of ffmpeg)."""
    if not shutil.which("ffmpeg"):
        pytest.skip("needs Debian's ffmpeg to make the videos (apt-get install ffmpeg; .ci/run installs it)")
    root = tmp_path_factory.mktemp("torchcodec_zoo")
    paths = {}
    for name, frames in FORMS.items():
        form = dataclasses.replace(video_zoo.form(name), frames=frames)
        paths[name] = root / form.file
        video_zoo._encode(form, paths[name])
    return paths


def shown_size(name: str) -> tuple[int, int]:
    form = video_zoo.form(name)
    return (form.height, form.width) if form.rotate else (form.width, form.height)


def numbers(frames: np.ndarray) -> list[int]:
    """The frame number each upright (N, H, W, 3) zoo frame shows (video_zoo.picture's bars), at any size."""
    height, width = frames.shape[1:3]
    bar = width / video_zoo.BITS
    rows = frames[:, height // 8 : 3 * height // 8].mean(axis=(1, 3))  # (N, W): the top half's middle rows
    inner = [(round(b * bar + bar / 4), round((b + 1) * bar - bar / 4)) for b in range(video_zoo.BITS)]
    bits = [rows[:, left:right].mean(axis=1) > 127 for left, right in inner]
    return [sum(int(bits[b][t]) << b for b in range(video_zoo.BITS)) for t in range(len(frames))]


def off(got: np.ndarray, want: np.ndarray) -> str:
    """The empty string when ``got`` is within the tolerance of ``want`` (see the module), else what is off."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape {got.shape} {got.dtype}, the reference's {want.shape} {want.dtype}"
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    if diff.max() > 2 or (diff > 0).mean() > 0.01:
        return f"{(diff > 0).mean():.2%} of the values differ, by up to {diff.max()}"
    return ""


def test_torchcodec_gives_the_pyav_readers_frames_at_the_displayed_size(zoo: dict[str, Path]) -> None:
    for name, path in zoo.items():
        width, height = shown_size(name)
        got = read_frames(path, INDICES, width, height, "torchcodec")
        assert got.shape == (len(INDICES), height, width, 3) and got.dtype == np.uint8, name
        assert off(got, read_frames(path, INDICES, width, height, "pyav")) == "", name
        if not video_zoo.form(name).rotate:
            assert numbers(got) == INDICES, name


def test_at_another_size_torchcodec_resizes_as_the_decord_path(zoo: dict[str, Path]) -> None:
    """Its frames at the displayed size, resized in RGB (resize_rgb): within a mean of the PyAV reader's YUV resize,
    and far from a neighbouring frame."""
    for name in ("b-frames-gop-300", "rotated-90", "10-bit"):
        path, (width, height) = zoo[name], (96, 72)
        got = read_frames(path, INDICES, width, height, "torchcodec")
        whole = read_frames(path, INDICES, *shown_size(name), "pyav")
        assert off(got, resize_rgb(whole, width, height)) == "", name
        by_pyav = read_frames(path, INDICES, width, height, "pyav")
        difference = np.abs(got.astype(int) - by_pyav).mean(axis=(1, 2, 3))
        assert difference.max() <= RESIZED_MEAN_TOLERANCE, (name, difference)
        neighbour = np.abs(got[[2, 5]].astype(int) - by_pyav[[5, 2]]).mean(axis=(1, 2, 3))  # frames 7 and 8
        assert neighbour.min() > 3 * RESIZED_MEAN_TOLERANCE, (name, neighbour)


def test_the_training_dataset_reads_with_torchcodec(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    write_video(tmp_path / "good.mp4", rng.integers(0, 255, (40, 64, 84, 3), dtype=np.uint8), 25, 8)
    (tmp_path / "val.lst").write_text("good.mp4 40 0\n")
    items = {}
    for decoder in ("pyav", "torchcodec"):
        recipe = load_recipe("slowfast_tiny_synthetic", {"data": {"decoder": decoder}})  # the schema takes it
        items[decoder] = build_dataset(recipe, tmp_path / "val.lst", tmp_path, "val", 0)[0]  # (slow, fast, label)
    assert items["torchcodec"][2] == items["pyav"][2] == 0
    for pathway in (0, 1):
        assert off(items["torchcodec"][pathway].numpy(), items["pyav"][pathway].numpy()) == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: nvdec is not refused")
def test_nvdec_is_refused_by_name_where_there_is_no_cuda_device(tmp_path: Path) -> None:
    recipe = load_recipe("slowfast_tiny_synthetic", {"data": {"decoder": "nvdec"}})
    with pytest.raises(ClipflowError) as error:  # where each training worker builds its dataset, before any read
        build_dataset(recipe, tmp_path / "train.lst", tmp_path, "train", 0)
    assert str(error.value) == NO_GPU
    with pytest.raises(ClipflowError) as error:
        read_frames(tmp_path / "any.mp4", [0], 32, 32, "nvdec")
    assert str(error.value) == NO_GPU


def test_torchcodec_that_cannot_run_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import torchcodec

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torchcodec, "__version__", "0.17.0+cpu")
    with pytest.raises(ClipflowError, match=r"^data\.decoder nvdec .*: the torchcodec installed here \(0\.17\.0\+cpu"):
        prepare("nvdec")
    monkeypatch.setattr(torchcodec, "ffmpeg_major_version", None)
    with pytest.raises(ClipflowError, match=r"^data\.decoder torchcodec .* found no FFmpeg shared libraries"):
        prepare("torchcodec")
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    with pytest.raises(ClipflowError, match=r"^data\.decoder nvdec cannot decode in a loader process forked"):
        read_frames(tmp_path / "any.mp4", [0], 32, 32, "nvdec")


def test_a_video_torchcodec_cannot_read_is_named_as_the_other_readers_name_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    write_video(tmp_path / "good.mp4", rng.integers(0, 255, (24, 48, 64, 3), dtype=np.uint8), 25, 8)
    for name, reason in bad_videos(tmp_path, tmp_path / "good.mp4").items():
        with pytest.raises(ClipflowError) as error:
            read_frames(tmp_path / name, [0, 1], 32, 32, "torchcodec")
        assert str(error.value) == reason, name
        assert decoder_text_in(str(error.value)) == [] and ".cpp" not in str(error.value), name
    with pytest.raises(ClipflowError, match="^frame 24 is out of range: the video has 24 frames$"):
        read_frames(tmp_path / "good.mp4", [0, 24], 32, 32, "torchcodec")
    if not shutil.which("ffmpeg"):
        return  # the turned video below is written by ffmpeg
    turned = tmp_path / "turned_45.mp4"  # torchcodec alone would show it turned by 90
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(tmp_path / "good.mp4"), "-c", "copy",
                    "-metadata:s:v:0", "rotate=45", str(turned)], check=True)  # fmt: skip
    for decoder in ("pyav", "torchcodec"):
        with pytest.raises(ClipflowError) as error:
            read_frames(turned, [0], 32, 32, decoder)
        assert str(error.value) == "its display matrix turns the picture by 315 degrees; only quarter turns are read"


def test_a_video_is_opened_by_pyav_once_a_process_while_it_stays_the_same(monkeypatch, tmp_path: Path) -> None:
    """torchcodec reads a clip; PyAV's opening (the user's words for a bad file, the first video stream) is done
    once a file, again when the file changes."""
    from clipflow.data import torchcodec_reader

    opened: list[Path] = []
    real = torchcodec_reader.open_video
    monkeypatch.setattr(torchcodec_reader, "open_video", lambda path: opened.append(path) or real(path))
    rng = np.random.default_rng(5)
    video = tmp_path / "v.mp4"
    write_video(video, rng.integers(0, 255, (24, 48, 64, 3), dtype=np.uint8), 25, 8)
    first = read_frames(video, [0, 5], 32, 32, "torchcodec")
    assert np.array_equal(read_frames(video, [0, 5], 32, 32, "torchcodec"), first) and opened == [video]
    video.write_text("not a video")  # the same name, other bytes: looked at again, and named
    with pytest.raises(ClipflowError) as error:
        read_frames(video, [0], 32, 32, "torchcodec")
    assert opened == [video, video] and ".cpp" not in str(error.value)
