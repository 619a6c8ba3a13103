"""clipflow.data.reader: the PyAV reader gives decord's frames, whatever the GOP and B-frames.

The videos show noise (so the encoder makes real P- and B-frames, some of them
reference frames), tinted red above and blue below (so swapped channels show), and
their frame number as 8 black or white bars. Each is compared three ways: the frame
numbers read back, the pixels of a plain sequential PyAV decode of the whole video,
and decord's get_batch. Resized, the decord path's frames are compared with the PyAV
path's.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from bad_input_helpers import write_audio_only
from video_helpers import read_counters  # the same 8-bar frame numbers, 128 x 64

from clipflow.data.reader import SEEK_AFTER, FrameTable, PyAVReader, read_frames, runs
from clipflow.errors import ClipflowError

WIDTH, HEIGHT, BITS = 128, 64, 8


def counter_video(path: Path, count: int, keyint: int, bframes: int) -> Path:
    """libx264 with ``bframes`` B-frames (pyramid: some are references) and a keyframe every ``keyint``."""
    rng = np.random.default_rng(count)
    bar = WIDTH // BITS
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.gop_size = keyint
        stream.options = {"bf": str(bframes), "b-pyramid": "normal", "scenecut": "0", "crf": "18"}
        for t in range(count):
            frame = (rng.random((HEIGHT, WIDTH, 3)) * 60).astype(np.uint8)
            frame[: HEIGHT // 4] += np.array([120, 40, 0], np.uint8)  # red above
            frame[3 * HEIGHT // 4 :] += np.array([0, 40, 120], np.uint8)  # blue below
            frame[HEIGHT // 4 : 3 * HEIGHT // 4] = 0
            for b in range(BITS):
                if t >> b & 1:
                    frame[HEIGHT // 4 : 3 * HEIGHT // 4, b * bar : (b + 1) * bar] = 255
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())
    return path


def shown_numbers(frames: np.ndarray) -> list[int]:
    """The frame number each (N, H, W, 3) frame shows, at any size (read_counters reads 128 x 64 frames)."""
    height, width = frames.shape[1:3]
    bar = width / BITS
    middle = frames[:, height // 4 : 3 * height // 4].mean(axis=(1, 3))  # (N, W): the bars' rows
    inner = [(round(b * bar + bar / 4), round((b + 1) * bar - bar / 4)) for b in range(BITS)]  # off the edges
    bits = [middle[:, left:right].mean(axis=1) > 127 for left, right in inner]
    return [sum(int(bits[b][t]) << b for b in range(BITS)) for t in range(len(frames))]


def sequential(path: Path) -> np.ndarray:
    """Every frame, decoded front to back with PyAV: the reference pixels."""
    with av.open(str(path)) as container:
        frames = [(f.pts, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    return np.stack([a for _, a in sorted(frames, key=lambda pair: pair[0])])


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("reader")
    return {
        "gop16_b3": counter_video(folder / "gop16_b3.mp4", 150, 16, 3),
        "gop250_b3": counter_video(folder / "gop250_b3.mp4", 120, 250, 3),
        "gop8_no_b": counter_video(folder / "gop8_no_b.mp4", 80, 8, 0),
    }


def index_sets(count: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    window = [int(s) + k for s in rng.integers(0, count - 64, 1) for k in range(0, 64, 2)]  # a 4x16 fast pathway
    spread = sorted(int(i) for i in rng.choice(count, 12, replace=False))  # a test item's clips: several seeks
    return [window, spread, [count - 1, 0, 5, 5, count // 2], [0], [count - 1]]


@pytest.mark.parametrize("name", ["gop16_b3", "gop250_b3", "gop8_no_b"])
def test_pyav_frames_equal_a_sequential_decode_and_decord(videos: dict[str, Path], name: str) -> None:
    import decord

    path = videos[name]
    everything = sequential(path)
    reference = decord.VideoReader(str(path), num_threads=1)
    assert len(PyAVReader(path, WIDTH, HEIGHT)) == len(reference) == len(everything)
    for indices in index_sets(len(everything)):
        got = read_frames(path, indices, WIDTH, HEIGHT)
        assert got.shape == (len(indices), HEIGHT, WIDTH, 3) and got.dtype == np.uint8
        assert read_counters(got) == indices
        # exact on any CPU: both are this PyAV's swscale converting the same decoded frames at their size (its
        # unscaled YUV-to-RGB code, which the interpolation flag does not reach)
        np.testing.assert_array_equal(got, everything[indices])
        by_decord = reference.get_batch(indices).asnumpy()
        # decord converts with its own FFmpeg build, whose SIMD code is chosen by the CPU: 2 levels allowed (0 here)
        assert np.abs(got.astype(int) - by_decord).max() <= 2, "PyAV and decord convert YUV to RGB alike"


# Mean absolute difference allowed per frame between the decord path's and the PyAV path's resized
# frames. They are not the same operations: PyAV resizes the YUV planes (chroma at half size) and
# converts, decord's frames are RGB (chroma upsampled) before the resize, so the tinted noise differs
# by up to ~35 at single pixels but by a mean of 1.3 to 2.3 per frame (measured at 64x32 to 160x80);
# 4 leaves room for another CPU's swscale rounding in the PyAV path. A wrong frame differs by a mean
# of 19 or more (its noise), red and blue swapped by 39 or more (the tints): the test checks both.
RESIZED_MEAN_TOLERANCE = 4.0


@pytest.mark.parametrize("size", [(96, 48), (160, 80), (WIDTH, HEIGHT)])
def test_the_decord_path_resizes_as_the_pyav_path(videos: dict[str, Path], size: tuple[int, int]) -> None:
    """decord decodes at the stored size and clipflow resizes (decord2 3.4.0's own resize fails on some CPUs)."""
    import decord

    width, height = size
    path, indices = videos["gop16_b3"], [3, 40, 41, 100, 100, 7]
    by_decord = read_frames(path, indices, width, height, "decord")
    by_pyav = read_frames(path, indices, width, height)
    assert by_decord.shape == by_pyav.shape == (len(indices), height, width, 3)
    assert by_decord.dtype == by_pyav.dtype == np.uint8
    assert shown_numbers(by_decord) == shown_numbers(by_pyav) == indices
    difference = np.abs(by_decord.astype(int) - by_pyav).mean(axis=(1, 2, 3))
    assert difference.max() <= RESIZED_MEAN_TOLERANCE, difference
    # the tolerance tells apart a neighbouring frame (40 for 41 and back) and swapped red and blue
    neighbour = np.abs(by_decord[[1, 2]].astype(int) - by_pyav[[2, 1]]).mean(axis=(1, 2, 3))
    swapped = np.abs(by_decord[..., ::-1].astype(int) - by_pyav).mean(axis=(1, 2, 3))
    assert neighbour.min() > 3 * RESIZED_MEAN_TOLERANCE and swapped.min() > 3 * RESIZED_MEAN_TOLERANCE
    if size == (WIDTH, HEIGHT):  # nothing to resize: decord's own frames
        whole = decord.VideoReader(str(path), num_threads=1).get_batch(indices).asnumpy()
        np.testing.assert_array_equal(by_decord, whole)


def test_runs_seek_only_when_that_skips_enough_frames() -> None:
    table = FrameTable(pts=list(range(200)), keys=[0, 16, 32, 48, 64, 80, 96, 150])
    assert SEEK_AFTER == 16
    assert runs(table, [2, 10, 15]) == [[2, 10, 15]]  # no keyframe between
    assert runs(table, list(range(1, 100, 2))) == [list(range(1, 100, 2))]  # a clip across keyframes: decode on
    assert runs(table, [2, 17, 20]) == [[2, 17, 20]]  # keyframe 16 is 14 frames past 2: not worth a seek
    assert runs(table, [2, 33]) == [[2], [33]]  # keyframe 32 is 30 frames past 2: seek
    assert runs(table, [17, 31, 33, 120, 160]) == [[17, 31, 33], [120], [160]]  # keyframes 96 and 150
    assert table.key_at_or_before(47) == 32 and table.key_at_or_before(0) == 0


def test_non_reference_frames_that_no_clip_needs_are_not_decoded(videos: dict[str, Path]) -> None:
    """Every other frame of a window, with B-frames among the rest: fewer frames come out of the
    decoder than the span from the keyframe holds (the pixels of the needed ones: the test above)."""
    reader = PyAVReader(videos["gop16_b3"], WIDTH, HEIGHT)
    window = list(range(33, 97, 2))
    assert read_counters(reader.get(window)) == window
    reader.close()
    span = 96 - reader.table.key_at_or_before(33)  # from the keyframe to frame 95
    assert reader.frames_decoded < span, f"{reader.frames_decoded} frames decoded for a span of {span}"
    plain = PyAVReader(videos["gop8_no_b"], WIDTH, HEIGHT)  # no B-frames: nothing to skip
    plain.get([9, 11, 13])
    plain.close()
    assert plain.frames_decoded == 14 - plain.table.key_at_or_before(9)


def test_bad_videos_and_frames_are_named(videos: dict[str, Path], tmp_path: Path) -> None:
    path = videos["gop8_no_b"]
    with pytest.raises(ClipflowError, match="frame 80 is out of range: the video has 80 frames"):
        read_frames(path, [3, 80], WIDTH, HEIGHT)
    with pytest.raises(ClipflowError, match="frame -1 is out of range"):
        read_frames(path, [-1], WIDTH, HEIGHT)
    text = tmp_path / "notes.mp4"
    text.write_text("not a video\n")
    for decoder in ("pyav", "decord"):
        with pytest.raises(ClipflowError) as error:
            read_frames(text, [0], WIDTH, HEIGHT, decoder)
        assert str(error.value) and "Traceback" not in str(error.value)
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with pytest.raises(ClipflowError):
        read_frames(truncated, [0, 79], WIDTH, HEIGHT)
    sound = write_audio_only(tmp_path / "sound.mp4")
    with pytest.raises(ClipflowError, match="no video stream"):
        read_frames(sound, [0], WIDTH, HEIGHT)
    with pytest.raises(ClipflowError, match="decoder must be one of pyav, decord, torchcodec, nvdec, not 'opencv'"):
        read_frames(path, [0], WIDTH, HEIGHT, "opencv")
