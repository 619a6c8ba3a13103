"""Data stage: list files, the decord scan with broken videos, clip sampling, splits."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from disk_helpers import PAGE, files_on, fill, full_message
from helpers import assert_refused, clipflow, python_env

from clipflow.checksums import sha256_of
from clipflow.data.dataset import ClipShape, SlowFastClips
from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.data.sampling import ClipSpec, slowfast_indices, span_indices, train_offsets, val_offsets
from clipflow.data.scan import scan, write_index
from clipflow.data.splits import epoch_order, split_entries
from clipflow.data.synthetic import CLASSES
from clipflow.data.transforms import TransformSpec
from clipflow.errors import ClipflowError


def test_synthetic_set_is_made_once(tiny_videos):
    from clipflow.data.synthetic import SyntheticSpec, generate

    videos = sorted((tiny_videos / "videos").rglob("*.mp4"))
    assert len(videos) == 24
    stamps = {p: p.stat().st_mtime_ns for p in videos}
    generate(tiny_videos, SyntheticSpec(num_train=16, num_val=8, min_frames=24, max_frames=40, short_side=64))
    assert {p: p.stat().st_mtime_ns for p in videos} == stamps
    labels = read_list(tiny_videos / "train_labels.txt")
    assert {e.label for e in labels} == set(range(len(CLASSES)))


ON_ONE_CPU = """
import os, sys
from pathlib import Path
import numpy as np
from clipflow.data.reencode import ReencodeSpec, reencode
from clipflow.data.synthetic import SyntheticSpec, encode_to_tmp, render
out = Path(sys.argv[1])
if sys.argv[2] == "one":
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
spec = SyntheticSpec(short_side=256)
encode_to_tmp(out / "made.mp4", render(5, 48, spec, np.random.default_rng(3)), spec.fps, spec.keyframe_interval).rename(
    out / "made.mp4")
reencode(out / "made.mp4", out / "again.mp4", ReencodeSpec(short_side=240), threads=0)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to compare with 1")
def test_the_synthetic_set_and_a_reencode_are_the_same_files_on_one_cpu_as_on_all(tmp_path):
    """x264 takes its thread count from the CPUs a process may use, and its bitstream from that count: the
    synthetic set and every re-encode would differ between machines (and from the docs' figures)."""
    made = {}
    for cpus in ("one", "all"):
        (tmp_path / cpus).mkdir()
        done = subprocess.run([sys.executable, "-c", ON_ONE_CPU, str(tmp_path / cpus), cpus], capture_output=True,
                              text=True, env=python_env(), timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        made[cpus] = {name: sha256_of(tmp_path / cpus / name) for name in ("made.mp4", "again.mp4")}
    assert made["one"] == made["all"]


def test_a_synthetic_set_on_a_full_disk_is_one_line_and_leaves_no_video_under_its_name(small_disk):
    """Issue 30: a full disk ended `data synth` in a traceback."""
    out = small_disk / "set"
    free = fill(small_disk, 5 * PAGE)  # the lists, the class index and clipflow's record fit; the first video does not
    line = assert_refused(clipflow("data", "synth", "--out-dir", str(out), "--num-train", "8", "--num-val", "8",
                                   "--min-frames", "24", "--max-frames", "24", "--short-side", "128",
                                   "--workers", "1"))  # fmt: skip
    first = out / f"videos/train/train_00000_{CLASSES[0]}.mp4"
    assert line == "clipflow: error: " + full_message(first, f"more than {PAGE}", PAGE), free
    assert files_on(small_disk) == ["set/.clipflow-made.json", "set/classes.txt", "set/train_labels.txt",
                                    "set/val_labels.txt"]  # fmt: skip


def test_scan_counts_frames_and_keeps_good_videos(tiny_videos, tmp_path):
    results = scan(read_list(tiny_videos / "train_labels.txt", 8), tiny_videos, workers=2)
    assert all(r.error is None for r in results)
    assert all(24 <= r.num_frames <= 40 for r in results)
    assert {(r.width, r.height) for r in results} == {(84, 64)}
    manifest = write_index({"train": results}, tmp_path, CLASSES, tiny_videos)
    entries = read_list(tmp_path / "train.lst")
    assert [e.num_frames for e in entries] == [r.num_frames for r in results]
    assert manifest["splits"]["train"]["videos"] == 16 and manifest["failures"] == []


def test_scan_lists_each_broken_video_with_its_reason(tiny_videos, tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(tiny_videos / "videos", root / "videos")
    good = sorted((root / "videos" / "train").glob("*.mp4"))
    data = good[0].read_bytes()
    (root / "truncated.mp4").write_bytes(data[: len(data) // 3])
    (root / "empty.mp4").write_bytes(b"")
    (root / "text.mp4").write_text("this is not a video\n")
    lst = tmp_path / "raw.txt"
    lst.write_text(
        "".join(
            [
                f"{good[0].relative_to(root)} 0\n",
                f"{good[1].relative_to(root)} 1\n",
                "missing.mp4 2\n",
                "truncated.mp4 3\n",
                "empty.mp4 4\n",
                "text.mp4 5\n",
                f"{good[0].relative_to(root)} 0\n",
            ]
        )
    )
    results = scan(read_list(lst, 8), root, workers=2)
    manifest = write_index({"train": results}, tmp_path / "index", None, root)
    reasons = {f["path"]: f["error"] for f in manifest["failures"]}
    assert manifest["splits"]["train"]["videos"] == 2
    assert "not found" in reasons["missing.mp4"]
    assert "empty" in reasons["empty.mp4"]
    assert reasons["truncated.mp4"] and reasons["text.mp4"]
    assert any(f["error"] == "duplicate entry" and f["line"] == 7 for f in manifest["failures"])
    on_disk = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert len(on_disk["failures"]) == 5


@pytest.mark.parametrize(
    "text, message",
    [
        ("a.mp4\n", "line 1: expected"),
        ("a.mp4 x 3\n", "line 1: label and frame count must be integers"),
        ("# c\na.mp4 10 -1\n", "line 2: label -1 is out of range"),
        ("a.mp4 0 1\n", "frame count 0 must be positive"),
        ("\n# only comments\n", "has no entries"),
    ],
)
def test_bad_list_lines_name_the_line(tmp_path, text, message):
    path = tmp_path / "bad.lst"
    path.write_text(text)
    with pytest.raises(ClipflowError, match=message):
        read_list(path)


def test_list_round_trip_and_missing_file(tmp_path):
    entries = [VideoEntry("a b/ü.mp4".replace(" ", "_"), 3, 50), VideoEntry("c.mp4", 0, 10)]
    write_list(tmp_path / "x.lst", entries)
    back = read_list(tmp_path / "x.lst")
    assert [(e.path, e.label, e.num_frames) for e in back] == [(e.path, e.label, e.num_frames) for e in entries]
    with pytest.raises(ClipflowError, match="does not exist"):
        read_list(tmp_path / "nope.lst")


def test_dataset_names_a_missing_video(tiny_videos, tmp_path):
    lst = tmp_path / "train.lst"
    write_list(lst, [VideoEntry("videos/train/not_there.mp4", 1, 30)])
    ds = SlowFastClips(lst, tiny_videos, ClipSpec(8, 1, 1, 2, 4), TransformSpec(32), 42, 32)
    with pytest.raises(ClipflowError, match=r"not_there.mp4 .*line 1\) does not exist"):
        ds[0]


def test_clip_shapes_and_determinism(tiny_videos, tmp_path):
    results = scan(read_list(tiny_videos / "train_labels.txt"), tiny_videos, workers=1)
    write_index({"train": results}, tmp_path, None, tiny_videos)
    spec = ClipSpec(new_length=16, new_step=1, fast_temporal_stride=2, slow_temporal_stride=8)
    ds = SlowFastClips(tmp_path / "train.lst", tiny_videos, spec, TransformSpec(32, (1.0, 0.875)), 42, 32, "train")
    slow, fast, label = ds[3]
    assert slow.shape == (3, 2, 32, 32) and fast.shape == (3, 8, 32, 32)
    again = ds[3][0]
    assert (again == slow).all()
    ds.set_epoch(1)
    assert not (ds[3][1] == fast).all()

    # a multigrid step's shape (clipflow.train.multigrid): 4 fast frames every 2nd to 4th frame, cropped to 23
    shape = ClipShape(frames=4, crop=23, least_stride=2, stride=4)
    slow, fast, _ = ds[(3, shape)]
    assert slow.shape == (3, 1, 23, 23) and fast.shape == (3, 4, 23, 23)
    strides = set()
    for index in range(len(ds)):
        plan = ds.plan(index, shape)
        steps = {b - a for a, b in zip(plan.fast, plan.fast[1:], strict=False)}
        assert len(plan.fast) == 4 and len(plan.slow) == 1 and plan.slow[0] in plan.fast and len(steps) <= 1, plan
        strides |= steps
    assert strides == {2, 3, 4}  # drawn per clip over the stage's range (videos of 24-40 frames: no clamping)
    same = ClipShape(frames=8, crop=23, least_stride=2, stride=2)  # the recipe's frames: only the crop differs
    assert (ds.plan(3, same).fast, ds.plan(3, same).box) == (ds.plan(3).fast, ds.plan(3).box)


def test_gluoncv_offsets_and_slowfast_layout():
    spec = ClipSpec(new_length=8, new_step=2, num_segments=1, fast_temporal_stride=2, slow_temporal_stride=4)
    assert val_offsets(40, spec).tolist() == [13]  # tick (40-16+1)/1 = 25, int(12.5) + 1
    assert span_indices(13, 40, spec) == [12, 14, 16, 18, 20, 22, 24, 26]
    fast, slow = slowfast_indices(np.array([13]), 40, spec)
    assert fast == [14, 18, 22, 26] and slow == [18, 26]
    # a video shorter than the clip repeats its last reachable frame
    assert val_offsets(10, spec).tolist() == [1]
    assert span_indices(1, 10, spec) == [0, 2, 4, 6, 8, 8, 8, 8]
    rng = np.random.default_rng(0)
    offsets = [int(train_offsets(40, spec, rng)[0]) for _ in range(200)]
    assert min(offsets) == 1 and max(offsets) == 25


@pytest.mark.parametrize("workers", range(1, 9))
@pytest.mark.parametrize("size", [13, 50, 101])
def test_splits_have_equal_length_and_cover_the_set(workers, size):
    entries = [VideoEntry(f"v{i}.mp4", i % 3, 10) for i in range(size)]
    parts = split_entries(entries, workers, seed=7)
    assert len({len(p) for p in parts}) == 1
    assert {e.path for p in parts for e in p} == {e.path for e in entries}
    assert len(parts[0]) * workers - size < workers


def test_split_errors_and_epoch_order():
    with pytest.raises(ClipflowError, match="cannot be split over 4 workers"):
        split_entries([VideoEntry("a.mp4", 0, 1)] * 3, 4, 0)
    assert (epoch_order(20, 1, 2) == epoch_order(20, 1, 2)).all()
    assert not (epoch_order(20, 1, 2) == epoch_order(20, 1, 3)).all()
