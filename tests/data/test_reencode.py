"""Re-encode stage: size, constant frame rate, keyframe spacing, no audio, reruns and broken inputs."""

from __future__ import annotations

import json
import math
import os
from fractions import Fraction
from pathlib import Path

import av
import decord
import pytest
from disk_helpers import PAGE, files_on, fill, full_message
from reencode_helpers import frame_number, write_counter_video

from clipflow.data.listfile import VideoEntry
from clipflow.data.reader import NOT_A_CONTAINER
from clipflow.data.reencode import JOURNAL, ReencodeSpec, reencode, reencode_tree
from clipflow.errors import ClipflowError


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """320x180, 25 fps, 60 frames (2.4 s), with audio."""
    path = tmp_path_factory.mktemp("src") / "counter.mp4"
    write_counter_video(path)
    return path


@pytest.mark.parametrize(
    "source_size, spec, size",
    [
        ((320, 180), ReencodeSpec(), (456, 256)),  # 320 * 256 / 180 = 455.1 -> 456, even
        ((320, 180), ReencodeSpec(width=340, height=256, fps=10), (340, 256)),  # GluonCV's fixed size, drops frames
        ((180, 320), ReencodeSpec(short_side=128), (128, 228)),  # portrait: the width is the short side
    ],
)
def test_reencode_size_rate_keyframes_and_no_audio(tmp_path, source, source_size, spec, size):
    src = source
    if source_size != (320, 180):
        src = tmp_path / "portrait.mp4"
        write_counter_video(src, *source_size)
    dst = tmp_path / "out" / "video.mp4"
    result = reencode(src, dst, spec)

    with av.open(str(src)) as inp:
        stream = inp.streams.video[0]
        duration = stream.duration * stream.time_base
        assert len(inp.streams.audio) == 1
    with av.open(str(dst)) as out:
        stream = out.streams.video[0]
        assert (stream.width, stream.height) == size
        assert stream.average_rate == spec.fps
        assert len(out.streams) == 1 and not out.streams.audio
        frames = list(out.decode(stream))
    with av.open(str(dst)) as out:
        packet_keys = [i for i, p in enumerate(p for p in out.demux(video=0) if p.size) if p.is_keyframe]

    count = len(frames)
    assert count == round(duration * spec.fps)  # the duration is kept
    assert (result.status, result.frames, (result.width, result.height)) == ("done", count, size)
    # as ffmpeg's fps filter: input frame j's time rounds to output slot floor(j * fps / 25 + 1/2), and output
    # frame k shows the last input frame whose slot is at or before k
    shown = [frame_number(f.to_ndarray(format="rgb24")) for f in frames]
    slot = [math.floor(Fraction(j * spec.fps, 25) + Fraction(1, 2)) for j in range(60)]
    assert shown == [max(j for j in range(60) if slot[j] <= k) for k in range(count)]
    every_16 = list(range(0, count, 16))
    assert [i for i, f in enumerate(frames) if f.key_frame] == every_16
    assert packet_keys == every_16

    reader = decord.VideoReader(str(dst), ctx=decord.cpu(0), num_threads=1)
    assert len(reader) == count
    assert reader.get_avg_fps() == pytest.approx(spec.fps)
    assert reader[count - 1].shape == (size[1], size[0], 3)


def test_output_size_keeps_aspect_with_even_sides():
    spec = ReencodeSpec(short_side=256)
    assert spec.output_size(640, 480) == (342, 256)  # 341.3 -> even 342
    assert spec.output_size(480, 640) == (256, 342)
    assert spec.output_size(1920, 1080) == (456, 256)
    assert spec.output_size(100, 100) == (256, 256)
    assert ReencodeSpec(width=340, height=256).output_size(1080, 1920) == (340, 256)
    assert ReencodeSpec(short_side=2).output_size(1001, 1000) == (2, 2)
    assert ReencodeSpec(fps=29.97002997).rate == Fraction(30000, 1001)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"short_side": 0}, "short_side must be a positive even integer"),
        ({"short_side": 255}, "short_side must be a positive even integer"),
        ({"short_side": 256.0}, "short_side must be a positive even integer"),
        ({"width": 340}, "width and height must be given together"),
        ({"height": 256}, "width and height must be given together"),
        ({"width": 341, "height": 256}, "width must be a positive even integer"),
        ({"width": 340, "height": -2}, "height must be a positive even integer"),
        ({"fps": 0}, "fps must be a positive number"),
        ({"fps": -30}, "fps must be a positive number"),
        ({"fps": float("nan")}, "fps must be a positive number"),
        ({"fps": "30"}, "fps must be a positive number"),
        ({"keyframe_interval": 0}, "keyframe_interval must be an integer >= 1"),
        ({"crf": 52}, "crf must be an integer from 0"),
        ({"crf": -1}, "crf must be an integer from 0"),
        ({"preset": "turbo"}, "'turbo' is not an x264 preset"),
    ],
)
def test_bad_spec_names_the_field(fields, message):
    with pytest.raises(ClipflowError, match=message):
        ReencodeSpec(**fields)


def test_failed_reencode_keeps_the_old_output(tmp_path):
    """The output is renamed into place only when complete: a failure leaves dst as it was and no part file."""
    src = tmp_path / "cut.mp4"
    write_counter_video(tmp_path / "whole.mp4", container_options={"movflags": "faststart"})
    data = (tmp_path / "whole.mp4").read_bytes()
    src.write_bytes(data[: len(data) * 2 // 3])  # index up front, so it opens and stops decoding early
    dst = tmp_path / "out.mp4"
    dst.write_bytes(b"previous output")
    with pytest.raises(ValueError, match=r"truncated: decoded \d+ of the 60 frames"):
        reencode(src, dst, ReencodeSpec())
    assert dst.read_bytes() == b"previous output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.mp4", "out.mp4", "whole.mp4"]


def test_tree_skips_up_to_date_outputs_and_redoes_changed_ones(tmp_path, source):
    src_root, dst_root = tmp_path / "src", tmp_path / "dst"
    (src_root / "sub").mkdir(parents=True)
    (src_root / "a.mp4").write_bytes(source.read_bytes())
    write_counter_video(src_root / "sub" / "b.mkv", frames=30, fps=30)
    entries = [VideoEntry("a.mp4", 0), VideoEntry("sub/b.mkv", 1)]
    outputs = [dst_root / "a.mp4", dst_root / "sub" / "b.mp4"]
    spec = ReencodeSpec(short_side=64)

    first = reencode_tree(entries, src_root, dst_root, spec, workers=2)
    assert [(r.status, r.frames, r.width, r.height) for r in first] == [("done", 72, 114, 64), ("done", 30, 114, 64)]
    assert [r.dst for r in first] == [str(p) for p in outputs]
    stamps = [p.stat().st_mtime_ns for p in outputs]

    again = reencode_tree(["a.mp4", "sub/b.mkv"], src_root, dst_root, spec, workers=2)
    assert [(r.status, r.frames, r.width, r.height) for r in again] == [
        ("skipped", 72, 114, 64),
        ("skipped", 30, 114, 64),
    ]
    assert [p.stat().st_mtime_ns for p in outputs] == stamps

    newer = stamps[1] + 10**9
    os.utime(src_root / "sub" / "b.mkv", ns=(newer, newer))
    touched = reencode_tree(entries, src_root, dst_root, spec)
    assert [r.status for r in touched] == ["skipped", "done"]

    changed = reencode_tree(entries, src_root, dst_root, ReencodeSpec(short_side=64, crf=30))
    assert [r.status for r in changed] == ["done", "done"]
    assert all(p.stat().st_mtime_ns > s for p, s in zip(outputs, stamps, strict=True))
    records = [json.loads(line) for line in (dst_root / JOURNAL).read_text().splitlines()]
    assert sorted(r["dst"] for r in records) == ["a.mp4", "sub/b.mp4"]
    assert {r["spec"]["crf"] for r in records} == {30}


def test_tree_reports_each_bad_input_and_finishes_the_good_ones(tmp_path, source):
    src_root, dst_root = tmp_path / "src", tmp_path / "dst"
    src_root.mkdir()
    data = source.read_bytes()
    (src_root / "good.mp4").write_bytes(data)
    (src_root / "good.avi").write_bytes(data)  # its stem is good.mp4's: kept apart as good.avi.mp4
    (src_root / "empty.mp4").write_bytes(b"")
    (src_root / "text.mp4").write_text("this is not a video\n")
    (src_root / "truncated.mp4").write_bytes(data[: len(data) // 3])  # its index, at the end, is cut off
    entries = ["good.mp4", "empty.mp4", "text.mp4", "missing.mp4", "truncated.mp4", "good.avi", "../up.mp4"]

    results = reencode_tree(entries, src_root, dst_root, ReencodeSpec(short_side=64), workers=2)
    by_name = {Path(r.src).name: r for r in results}
    assert [Path(r.src).name for r in results] == [Path(e).name for e in entries]
    assert by_name["good.mp4"].status == "done" and by_name["good.mp4"].frames == 72
    assert by_name["good.avi"].status == "done" and Path(by_name["good.avi"].dst).name == "good.avi.mp4"
    assert all(r.status == "failed" for r in results[1:] if r is not by_name["good.avi"])
    assert by_name["empty.mp4"].error == "empty file (0 bytes)"
    assert by_name["text.mp4"].error == NOT_A_CONTAINER
    assert by_name["missing.mp4"].error == "file not found"
    assert by_name["truncated.mp4"].error == NOT_A_CONTAINER
    assert "must be relative to the source root" in by_name["up.mp4"].error
    assert sorted(p.name for p in dst_root.iterdir()) == ["good.avi.mp4", "good.mp4", JOURNAL]
    assert decord.VideoReader(str(dst_root / "good.mp4")).get_avg_fps() == 30


def test_tree_removes_an_output_whose_source_now_fails_and_keeps_one_whose_source_is_gone(tmp_path, source):
    src_root, dst_root = tmp_path / "src", tmp_path / "dst"
    src_root.mkdir()
    for name in ("a.mp4", "b.mp4"):
        (src_root / name).write_bytes(source.read_bytes())
    spec = ReencodeSpec(short_side=64)
    assert [r.status for r in reencode_tree(["a.mp4", "b.mp4"], src_root, dst_root, spec)] == ["done", "done"]

    (src_root / "a.mp4").write_text("replaced by something that is no video\n")
    later = (dst_root / "a.mp4").stat().st_mtime_ns + 10**9
    os.utime(src_root / "a.mp4", ns=(later, later))
    (src_root / "b.mp4").unlink()  # e.g. a source folder not mounted: its output must survive
    results = reencode_tree(["a.mp4", "b.mp4"], src_root, dst_root, spec)

    assert [(r.status, r.error) for r in results] == [
        ("failed", NOT_A_CONTAINER),
        ("failed", "file not found"),
    ]
    assert not (dst_root / "a.mp4").exists() and (dst_root / "b.mp4").exists()
    records = [json.loads(x) for x in (dst_root / JOURNAL).read_text().splitlines()]
    assert [r["dst"] for r in records if "error" not in r] == ["b.mp4"]
    assert [(r["dst"], r["error"]) for r in records if "error" in r] == [("a.mp4", NOT_A_CONTAINER)]  # for the scan


def test_videos_of_one_folder_sharing_a_stem_are_reencoded_apart(tmp_path):
    """``a.mkv`` and ``a.mp4`` side by side (a download kept in two forms) make two outputs, ``a.mkv.mp4`` and
    ``a.mp4``, each from its own source; before, the second was dropped as made from the first."""
    src = tmp_path / "src"
    src.mkdir()
    write_counter_video(src / "a.mkv", frames=20, container_options=None)
    write_counter_video(src / "a.mp4", frames=30)
    write_counter_video(src / "b.webm.mkv", frames=10)  # its own stem: b.webm.mp4
    results = reencode_tree(
        ["a.mkv", "a.mp4", "b.webm.mkv"], src, tmp_path / "out", ReencodeSpec(short_side=64, fps=25)
    )
    assert [(Path(r.dst).name, r.status, r.frames) for r in results] == [
        ("a.mkv.mp4", "done", 20), ("a.mp4", "done", 30), ("b.webm.mp4", "done", 10)
    ]  # fmt: skip
    with av.open(str(tmp_path / "out" / "a.mkv.mp4")) as out:
        assert out.streams.video[0].frames == 20


def test_a_reencode_on_a_full_disk_is_one_line_and_leaves_no_video_under_its_name(tmp_path, source, small_disk):
    """Issue 30: an output video written on a full disk; the journal keeps only whole lines."""
    dst_root = small_disk / "dst"
    free = fill(small_disk, PAGE)  # less than the video needs
    with pytest.raises(ClipflowError) as failed:
        reencode_tree([source.name], source.parent, dst_root, ReencodeSpec(short_side=64))
    assert str(failed.value) == full_message(dst_root / "counter.mp4", f"more than {PAGE}", free)
    assert files_on(small_disk) == [f"dst/{JOURNAL}"] and (dst_root / JOURNAL).read_text() == ""
