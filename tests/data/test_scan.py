"""The scan journal: a killed scan resumes without decoding again what it had finished."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from disk_helpers import files_on, fill, full_message
from helpers import assert_refused, clipflow, python_env

from clipflow.data.listfile import VideoEntry, write_list
from clipflow.data.scan import ShortVideos, scan, scan_lists
from clipflow.data.synthetic import write_video
from clipflow.errors import ClipflowError

FPS = 25
# two short videos, then longer ones, so that a kill after two journal lines lands mid-scan
RESUME_FRAMES = [12, 16, 300, 320, 340, 360]

SCAN_IN_SUBPROCESS = """
import sys
from clipflow.data.listfile import read_list
from clipflow.data.scan import scan
scan(read_list(sys.argv[1]), sys.argv[2], workers=1, journal=sys.argv[3])
"""


def make_video(path, num_frames, seed):
    frames = np.random.default_rng(seed).integers(0, 256, (num_frames, 48, 64, 3), dtype=np.uint8)
    write_video(path, frames, FPS, keyframe_interval=16)


def make_set(root, frame_counts):
    """Videos v0.mp4 ... under root, and their entries (label i % 3, line i + 1)."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, count in enumerate(frame_counts):
        make_video(root / f"v{i}.mp4", count, seed=i)
        entries.append(VideoEntry(f"v{i}.mp4", i % 3, None, i + 1))
    return entries


def journal_paths(journal):
    """Paths of the complete lines of a journal, in order."""
    text = journal.read_text(encoding="utf-8")
    return [json.loads(line)["path"] for line in text[: text.rfind("\n") + 1].splitlines()]


def decoded(results):
    return [r.path for r in results if not r.from_journal]


def scan_until_killed(entries, root, journal, tmp_path):
    """Runs a journalled scan in a subprocess and SIGKILLs it (with its pool) once 2 videos are done."""
    lst = tmp_path / "videos.lst"
    write_list(lst, [VideoEntry(e.path, e.label, 1, e.line) for e in entries])
    proc = subprocess.Popen(
        [sys.executable, "-c", SCAN_IN_SUBPROCESS, str(lst), str(root), str(journal)],
        env=python_env(),
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    try:
        while not (journal.exists() and journal.read_text(encoding="utf-8").count("\n") >= 2):
            assert proc.poll() is None, f"scan ended before it was killed: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "the journal never got 2 lines"
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def test_killed_scan_resumes_with_only_the_remaining_videos(tmp_path):
    root = tmp_path / "videos"
    entries = make_set(root, RESUME_FRAMES)
    journal = tmp_path / "scan.journal"
    scan_until_killed(entries, root, journal, tmp_path)
    done = journal_paths(journal)
    assert 2 <= len(done) < len(entries), done
    remaining = [e.path for e in entries if e.path not in done]

    resumed = scan(entries, root, workers=2, journal=journal)

    assert decoded(resumed) == remaining
    assert sorted(journal_paths(journal)[len(done) :]) == sorted(remaining)  # each decoded video journalled once
    fresh = scan(entries, root, workers=2)
    assert decoded(fresh) == [e.path for e in entries]
    assert resumed == fresh
    assert [r.num_frames for r in resumed] == RESUME_FRAMES
    assert [r.line for r in resumed] == [e.line for e in entries]
    assert all(r.error is None and r.duration == r.num_frames / FPS for r in resumed)


def test_progress_bar_counts_journalled_videos_as_done(tmp_path, monkeypatch, capsys):
    root = tmp_path / "videos"
    entries = make_set(root, [10, 12, 14, 16])
    journal = tmp_path / "scan.journal"
    scan(entries[:3], root, journal=journal)
    monkeypatch.setenv("CLIPFLOW_NO_PROGRESS", "0")
    capsys.readouterr()
    results = scan(entries, root, journal=journal, desc="resume")
    bar = capsys.readouterr().err
    assert decoded(results) == ["v3.mp4"]
    assert re.search(r"resume: +75%.* 3/4 ", bar) and re.search(r"resume: 100%.* 4/4 ", bar), bar


@pytest.mark.parametrize("change", ["rewrite", "touch", "relabel"])
def test_changed_file_or_label_is_decoded_again(tmp_path, change):
    root = tmp_path / "videos"
    entries = make_set(root, [10, 12, 14])
    journal = tmp_path / "scan.journal"
    first = scan(entries, root, journal=journal)
    target = root / "v1.mp4"
    if change == "rewrite":
        make_video(target, 20, seed=99)
    elif change == "touch":
        stat = target.stat()
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    else:
        entries[1] = VideoEntry("v1.mp4", 2, None, 2)

    again = scan(entries, root, journal=journal)

    assert decoded(again) == ["v1.mp4"]
    assert again[1].num_frames == (20 if change == "rewrite" else 12)
    assert again[1].label == entries[1].label
    assert again[0] == first[0] and again[2] == first[2]


def test_torn_last_line_is_set_aside_and_its_video_scanned_again(tmp_path, capsys):
    root = tmp_path / "videos"
    entries = make_set(root, [10, 12, 14])
    journal = tmp_path / "scan.journal"
    first = scan(entries, root, journal=journal)
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    torn = lines[-1][: len(lines[-1]) // 2]
    journal.write_text("".join(lines[:-1]) + torn, encoding="utf-8")
    torn_path = json.loads(lines[-1])["path"]
    capsys.readouterr()

    again = scan(entries, root, journal=journal)

    assert decoded(again) == [torn_path]
    assert again == first
    assert sorted(journal_paths(journal)) == ["v0.mp4", "v1.mp4", "v2.mp4"]
    assert journal.read_text(encoding="utf-8").endswith("\n")
    assert (tmp_path / "scan.journal.cut-1").read_text(encoding="utf-8") == torn
    assert f"{journal} ended in a line cut short ({len(torn.encode())} bytes" in capsys.readouterr().out


def test_missing_file_is_journalled_and_a_damaged_line_named(tmp_path):
    root = tmp_path / "videos"
    entries = make_set(root, [10]) + [VideoEntry("gone.mp4", 0, None, 2)]
    journal = tmp_path / "scan.journal"
    first = scan(entries, root, journal=journal)
    assert first[1].error == "file not found"
    again = scan(entries, root, journal=journal)
    assert decoded(again) == [] and again == first

    journal.write_text('{"path": "v0.mp4"}\n' + journal.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ClipflowError, match=r"scan.journal line 1: not a scan journal record"):
        scan(entries, root, journal=journal)


@pytest.mark.parametrize("leave_out", [False, True])
def test_videos_shorter_than_a_clip_are_counted_and_kept_or_left_out_with_the_reason(tmp_path, leave_out):
    """A 1-frame and a 6-frame video under clips spanning 16 frames: kept by default, counted in the manifest and
    said in the log; left out with the reason under data.short_videos: leave_out. A 16-frame video is not short."""
    root = tmp_path / "videos"
    root.mkdir()
    for name, frames in (("one.mp4", 1), ("six.mp4", 6), ("span.mp4", 16), ("long.mp4", 40)):
        make_video(root / name, frames, seed=frames)
    (tmp_path / "train.txt").write_text("one.mp4 0\nsix.mp4 1\nspan.mp4 0\nlong.mp4 1\n")
    (tmp_path / "val.txt").write_text("long.mp4 0\n")
    said = []
    manifest = scan_lists(tmp_path / "train.txt", tmp_path / "val.txt", root, 2, None, tmp_path / "index", 1,
                          log=said.append, short_videos=ShortVideos(16, leave_out))  # fmt: skip
    train = manifest["splits"]["train"]
    assert (manifest["clip_span"], train["shorter_than_clip"], manifest["splits"]["val"]["shorter_than_clip"]) == (
        16, 2, 0
    )  # fmt: skip
    failures = [(f["path"], f["error"]) for f in manifest["failures"]]
    if leave_out:
        assert train["videos"] == 2 and failures == [
            (name, f"shorter than a clip: {n} frames, a clip's window spans 16 (data.short_videos: leave_out)")
            for name, n in (("one.mp4", 1), ("six.mp4", 6))
        ]  # fmt: skip
        assert not any("repeat frames" in line for line in said)
    else:
        assert train["videos"] == 4 and failures == []
        assert "train: 2 kept videos are shorter than a clip's window of 16 frames: their clips repeat frames " \
               "(data.short_videos: leave_out leaves them out)" in said  # fmt: skip


def test_a_scan_on_a_full_disk_is_one_line_and_leaves_its_journals_and_no_half_index(tmp_path, tiny_videos, small_disk):
    """Issue 30: the index written on a full disk; the journals the scan resumes from stay whole."""
    lines = (tiny_videos / "train_labels.txt").read_text().splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:2]) + "\n")
    (tmp_path / "val.txt").write_text("\n".join(lines[2:3]) + "\n")
    out = small_disk / "index"
    args = ["data", "scan", "--train-list", str(tmp_path / "train.txt"), "--val-list", str(tmp_path / "val.txt"),
            "--root", str(tiny_videos), "--num-classes", "8", "--out-dir", str(out), "--workers", "1"]  # fmt: skip
    done = clipflow(*args)  # with room: the journals, then the index
    assert done.returncode == 0, done.stderr
    needed = (out / "train.lst").stat().st_size
    for name in ("train.lst", "val.lst", "manifest.json", "videos.json"):  # clipflow's, recorded: a rerun remakes them
        (out / name).unlink()
    kept = files_on(small_disk)
    free = fill(small_disk, 0)
    line = assert_refused(clipflow(*args))  # the journals answer for every video; the first list finds no room
    assert line == "clipflow: error: " + full_message(out / "train.lst", needed, free)
    assert (
        files_on(small_disk) == kept == ["index/.clipflow-made.json", "index/train.scan.jsonl", "index/val.scan.jsonl"]
    )
