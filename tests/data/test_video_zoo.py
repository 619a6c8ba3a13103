"""Videos in the forms real collections hold (tests/data/video_zoo.py, made by Debian's ffmpeg) are scanned, read
and re-encoded as ffmpeg shows them.

ffmpeg is the oracle: ``ffprobe -count_frames`` for the frame count and the displayed size, ffmpeg's own decode
(rotation applied, its colour conversion) for the pixels, its ``fps`` filter for the frames a re-encode must keep.

Tolerance for pixels: at most ``PIXEL_TOLERANCE`` levels apart, in at most ``OFF_FRACTION`` of the values. Both
sides convert with FFmpeg's swscale (clipflow through PyAV's FFmpeg 7, the oracle through Debian's 5.1; decord its
own), whose SIMD code is chosen by the CPU and rounds differently from its C code by one level (measured: 855 of
3.6 million values on a 340x256 to 224x168 resize). On this machine every form gave equal pixels with both
decoders. What the test guards against is far larger: a video read sideways differs by 126 levels on average,
10-bit or interlaced frames converted by a bare swscale context by up to 55 and 24 levels at colour edges, and a
frame that does not decode stops the read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import video_zoo as zoo_forms
from video_zoo import BROKEN, FORMS, ffmpeg_frames, ffprobe

from clipflow.data.listfile import VideoEntry
from clipflow.data.reader import PyAVReader, open_with_decord
from clipflow.data.reencode import ReencodeSpec, reencode
from clipflow.data.scan import scan

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

PIXEL_TOLERANCE = 2
OFF_FRACTION = 0.01
CLIP, EVERY = 32, 5  # a window of 32 frames starting every 5 frames
LEFT_OUT = {"cut-in-half": "no container format reads it"}  # its moov box was at the end, cut away


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Path]:
    if not (shutil.which("ffmpeg") and shutil.which("ffprobe")):
        pytest.skip("needs Debian's ffmpeg and ffprobe, the oracle (apt-get install ffmpeg; .ci/run installs it)")
    return zoo_forms.make_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def probed(zoo) -> dict[str, dict]:
    """ffprobe's view of every readable form."""
    return {name: ffprobe(path) for name, path in zoo.items() if name not in LEFT_OUT}


@pytest.fixture(scope="module")
def shown(zoo, probed) -> dict[str, np.ndarray]:
    """Every frame of every readable form as ffmpeg shows it."""
    return {name: ffmpeg_frames(zoo[name]) for name in probed}


def close_to(got: np.ndarray, want: np.ndarray) -> str:
    """ "" when ``got`` is within the tolerance of ``want`` (see the module), else what is off."""
    if got.shape != want.shape:
        return f"shape {got.shape}, ffmpeg's {want.shape}"
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    off = (diff > 0).mean()
    if diff.max() > PIXEL_TOLERANCE or off > OFF_FRACTION:
        return f"{off:.2%} of the values differ, by up to {diff.max()} (mean {diff.mean():.2f})"
    return ""


def test_the_zoo_holds_every_form_the_issue_names(zoo, probed):
    assert len(FORMS) + len(BROKEN) >= 24 and len(zoo) == len(FORMS) + len(BROKEN)
    assert probed["rotated-90"]["rotation"] == 90 and probed["rotated-270-mov"]["rotation"] == -90
    assert probed["full-range"]["range"] == probed["mjpeg-mov"]["range"] == "pc"
    assert probed["bt709"]["matrix"] == "bt709"
    assert probed["webm-named-mp4"]["frames"] == probed["vp9-webm-1ms"]["frames"]
    assert probed["10-bit"]["width"] == 320 and probed["1-frame"]["frames"] == 1


@pytest.mark.parametrize("decoder", ["pyav", "decord"])
def test_the_scan_counts_the_frames_ffprobe_counts_at_the_displayed_size(zoo, probed, decoder):
    entries = [VideoEntry(path.name, 0, None, line) for line, path in enumerate(zoo.values(), 1)]
    results = dict(zip(zoo, scan(entries, next(iter(zoo.values())).parent, decoder=decoder), strict=True))
    for name, reason in LEFT_OUT.items():
        assert reason in (results[name].error or ""), (name, results[name])
    for name, info in probed.items():
        result = results[name]
        turned = info["rotation"] % 180 != 0
        size = (info["height"], info["width"]) if turned else (info["width"], info["height"])
        assert result.error is None, (name, result.error)
        assert (result.num_frames, (result.width, result.height)) == (info["frames"], size), name


def windows(count: int) -> list[list[int]]:
    return [list(range(start, min(count, start + CLIP))) for start in range(0, max(1, count - CLIP + 1), EVERY)]


@pytest.mark.parametrize("decoder", ["pyav", "decord"])
def test_each_decoder_reads_clip_windows_as_ffmpeg_shows_them(zoo, shown, decoder):
    off = {}
    for name, frames_shown in shown.items():
        height, width = frames_shown.shape[1:3]
        if decoder == "pyav":
            reader = PyAVReader(zoo[name], width, height)
            read = reader.get
        else:
            reader, _ = open_with_decord(zoo[name], num_threads=1)
            read = lambda frames, reader=reader: reader.get_batch(frames).asnumpy()  # noqa: E731
        for frames in windows(len(frames_shown)):
            if problem := close_to(read(frames), frames_shown[frames]):
                off[name] = f"frames {frames[0]}-{frames[-1]}: {problem}"
                break
    assert off == {}


def test_the_reencode_keeps_the_frames_ffmpegs_fps_filter_picks_turned_upright(zoo, probed, tmp_path):
    spec = ReencodeSpec(short_side=128, fps=30)
    wrong = {}
    for name in probed:
        result = reencode(zoo[name], tmp_path / f"{name}.mp4", spec, threads=1)
        got = ffmpeg_frames(Path(result.dst)).astype(np.int16)
        size = (result.width, result.height)
        picked = ffmpeg_frames(zoo[name], "fps=30", size=size).astype(np.int16)  # turned first, then fps
        if len(got) != len(picked):
            wrong[name] = f"{len(got)} frames, ffmpeg's fps filter {len(picked)}"
            continue
        # each output frame is nearest to the frame the filter put there (or to one equal to it, a repeat)
        nearest = [int(np.argmin(np.abs(picked - frame).mean(axis=(1, 2, 3)))) for frame in got]
        moved = [k for k, j in enumerate(nearest) if not np.array_equal(picked[j], picked[k])]
        if moved:
            wrong[name] = f"output frames {moved[:5]} are not the fps filter's"
        info = ffprobe(Path(result.dst))
        if info["rotation"] != 0 or info["range"] != "tv":
            wrong[f"{name} tags"] = f"output tagged rotation {info['rotation']}, range {info['range']}"
    assert wrong == {}


@pytest.mark.parametrize("name", ["h264-mkv-1ms", "vfr-mkv", "25-fps-mkv", "rotated-90"])
def test_the_reencode_matched_to_a_clip_keeps_every_other_frame_of_the_fps_filter(zoo, tmp_path, name):
    """Frame step 2 (data.reencode.match_recipe for a stride 2): the frames of ffmpeg's fps=30 at even numbers
    (its select filter), at 15 fps, on millisecond timestamps, a variable rate, 25 fps and a turned video."""
    spec = ReencodeSpec(short_side=128, fps=30, frame_step=2)
    result = reencode(zoo[name], tmp_path / "out.mp4", spec, threads=1)
    got = ffmpeg_frames(Path(result.dst)).astype(np.int16)
    size = (result.width, result.height)
    picked = ffmpeg_frames(zoo[name], r"fps=30,select=not(mod(n\,2))", size=size).astype(np.int16)
    assert len(got) == len(picked) == result.frames, (len(got), len(picked), result.frames)
    # frame k is the filter's k-th, within the coding noise (measured at most 1.4 levels a frame on average; the
    # odd frames in their place are 17 to 111 off)
    assert np.abs(got - picked).mean(axis=(1, 2, 3)).max() <= 3
    assert ffprobe(Path(result.dst))["fps"] == "15/1"


@pytest.mark.parametrize("name", ["full-range", "mjpeg-mov", "bt709"])
def test_full_range_and_bt709_keep_their_levels_after_the_reencode(zoo, tmp_path, name):
    """The grey patch (191 in RGB), the ramp in 8 bands and the red patch's channels, as ffmpeg shows the source
    and the output, within 2 levels. Read as limited range, a full-range grey of 191 shows as 203, and the ramp's
    ends move by 11 or more; a band's mean leaves out the coding noise of single columns (up to 3 levels at
    CRF 23)."""
    result = reencode(zoo[name], tmp_path / "out.mp4", ReencodeSpec(short_side=128, fps=30), threads=1)
    size = (result.width, result.height)
    before = ffmpeg_frames(zoo[name], size=size).astype(float)
    after = ffmpeg_frames(Path(result.dst), size=size).astype(float)
    low = slice(size[1] // 2 + 4, size[1] - 4)
    third = size[0] // 3
    band = third // 8
    bands = [slice(4, third - 4)] + [slice(a, a + band) for a in range(third, 2 * third - band + 1, band)]
    colour = [(slice(size[1] // 2 + 4, size[1] * 3 // 4 - 4), slice(2 * third + 4, size[0] - 4), c) for c in range(3)]
    level_before = np.array([before[:, low, band].mean() for band in bands] + [before[c].mean() for c in colour])
    level_after = np.array([after[:, low, band].mean() for band in bands] + [after[c].mean() for c in colour])
    assert np.abs(level_after - level_before).max() <= 2, (name, level_before.round(1), level_after.round(1))
    assert abs(level_before[0] - 191) <= 3  # the source shows its grey as drawn
    assert level_before[-1] - level_before[1] > 150  # and its ramp
