"""Clip sampling read back from the pixels: every test video shows its frame number.

Each frame of these videos carries its index as 8 black or white bars (one bit each),
so after decoding (with PyAV and with decord) the test reads which frames a clip really got. The
expected indices come from a reference written from GluonCV's VideoClsCustom (tests/data/video_helpers.py)
loop (offsets per mode, the walk along the span, jitter, fast then slow per segment),
fed the same random generator as the dataset, and from PySlowFast's linspace rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from video_helpers import HEIGHT, WIDTH, counter_frames, gluoncv_reference, numbered_set, read_counters

from clipflow.data.dataset import SlowFastClips
from clipflow.data.sampling import (
    ClipSpec,
    PySlowFastSpec,
    gluoncv_frame_list,
    pyslowfast_indices,
)
from clipflow.data.transforms import TransformSpec
from clipflow.errors import ClipflowError

LENGTHS = {"short.mp4": 12, "medium.mp4": 40, "long.mp4": 150}


@pytest.fixture(scope="module")
def counter_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return numbered_set(tmp_path_factory.mktemp("counters"), LENGTHS, counter_frames)


SPECS = {
    "slowfast_4x16_like": ClipSpec(new_length=32, fast_temporal_stride=2, slow_temporal_stride=16),
    "three_segments": ClipSpec(new_length=8, num_segments=3, fast_temporal_stride=1, slow_temporal_stride=4),
    "step_2_jitter": ClipSpec(
        new_length=8, new_step=2, fast_temporal_stride=1, slow_temporal_stride=2, temporal_jitter=True
    ),
}


@pytest.mark.parametrize("decoder", ["pyav", "decord"])
@pytest.mark.parametrize("mode", ["train", "val", "test"])
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_decoded_frames_are_the_gluoncv_frames(counter_set: Path, mode: str, spec_name: str, decoder: str) -> None:
    spec = SPECS[spec_name]
    one_view = TransformSpec(32, test_clips=1, test_crops=1)  # GluonCV's test: one clip of num_segments segments
    ds = SlowFastClips(
        counter_set / "all.lst", counter_set, spec, one_view, WIDTH, HEIGHT, mode, seed=3, decoder=decoder
    )
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for index, entry in enumerate(ds.entries):
            plan = ds.plan(index)
            want = gluoncv_reference(entry.num_frames, spec, mode, np.random.default_rng([3, epoch, index]))
            layout = gluoncv_frame_list(np.array(plan.offsets), entry.num_frames, spec, plan.jitter)
            assert layout == [f for segment in want for f in segment], (entry.path, mode, epoch)
            decoded = read_counters(ds._read(entry, plan.fast))
            assert decoded == plan.fast, f"{entry.path}: decoded frames {decoded}, planned {plan.fast}"
            assert set(plan.slow) <= set(plan.fast)


def test_short_video_repeats_its_last_frame_and_long_train_clips_move(counter_set: Path) -> None:
    spec = SPECS["slowfast_4x16_like"]
    ds = SlowFastClips(counter_set / "all.lst", counter_set, spec, TransformSpec(32), WIDTH, HEIGHT, "val")
    short = ds.plan(0)  # 12 frames for a 32-frame span: the walk stops at the 11th (it advances while < 12)
    assert short.fast == [1, 3, 5, 7, 9, 10] + [10] * 10 and short.slow == [10, 10]
    assert read_counters(ds._read(ds.entries[0], short.fast)) == short.fast
    train = SlowFastClips(counter_set / "all.lst", counter_set, spec, TransformSpec(32), WIDTH, HEIGHT, "train")
    starts = set()
    for epoch in range(8):
        train.set_epoch(epoch)
        starts.add(train.plan(2).offsets[0])
    assert len(starts) > 4 and min(starts) >= 1 and max(starts) <= 150 - 32 + 1


def test_pyslowfast_layout_matches_its_linspace_rule(counter_set: Path) -> None:
    spec = PySlowFastSpec(num_frames=8, sampling_rate=4, alpha=4)
    fast, slow = pyslowfast_indices(150, 30.0, spec, clip_idx=1, num_clips=3)
    start = (150 - 32) * 1 / 3
    want = torch.clamp(torch.linspace(start, start + 31, 8), 0, 149).long().tolist()
    assert fast == want and fast[0] == 39 and fast[-1] == 70  # start 39.33, 32 frames at 30 fps
    assert slow == [fast[0], fast[7]]
    fast60, _ = pyslowfast_indices(150, 60.0, spec, clip_idx=0, num_clips=1)  # twice the frames per second
    assert fast60[-1] - fast60[0] == 63
    short, _ = pyslowfast_indices(12, 30.0, spec, clip_idx=0, num_clips=1)
    assert max(short) == 11
    ds = SlowFastClips(counter_set / "all.lst", counter_set, SPECS["three_segments"], TransformSpec(32), WIDTH, HEIGHT)
    assert read_counters(ds._read(ds.entries[2], fast)) == fast
    with pytest.raises(ClipflowError, match="needs the video's frame rate"):
        pyslowfast_indices(150, 0.0, spec)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"new_length": 0}, "new_length must be an integer >= 1, got 0"),
        ({"slow_temporal_stride": 3, "fast_temporal_stride": 2}, "must be a multiple of fast_temporal_stride"),
        ({"num_segments": 1.5}, "num_segments must be an integer >= 1"),
    ],
)
def test_bad_clip_settings_are_named(fields: dict, message: str) -> None:
    with pytest.raises(ClipflowError, match=message):
        ClipSpec(**fields)


def test_bad_mode_is_named(counter_set: Path) -> None:
    with pytest.raises(ClipflowError, match="mode must be one of train, val, test, not 'eval'"):
        SlowFastClips(counter_set / "all.lst", counter_set, ClipSpec(), TransformSpec(32), WIDTH, HEIGHT, "eval")


def test_frames_command_prints_each_videos_frames_and_crop(counter_set: Path) -> None:
    import json

    from helpers import clipflow

    from clipflow.data.build import build_dataset
    from clipflow.recipe import load_recipe

    listed = counter_set / "all.lst"
    done = clipflow("data", "frames", str(listed), "--recipe", "slowfast_tiny_synthetic", "--mode", "train")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in lines] == list(LENGTHS)
    ds = build_dataset(load_recipe("slowfast_tiny_synthetic"), listed, counter_set, "train", 0)
    ds.set_epoch(1)
    for index, record in enumerate(lines):
        plan = ds.plan(index)
        assert (record["fast"], record["slow"], record["offsets"]) == (plan.fast, plan.slow, plan.offsets)
        assert tuple(record["crop"].values()) == plan.box and record["flip"] == plan.flip
        assert record["gluoncv_order"] == plan.fast + plan.slow  # one segment: fast, then slow
        assert 0 <= record["crop"]["top"] <= 64 - record["crop"]["height"]
    bad = clipflow("data", "frames", str(counter_set / "nope.lst"), "--recipe", "slowfast_tiny_synthetic")
    assert bad.returncode != 0 and "list file" in bad.stderr and "nope.lst does not exist" in bad.stderr
    wrong = clipflow("data", "frames", str(listed), "--recipe", "slowfast_tiny_synthetic", "--mode", "eval")
    assert wrong.returncode == 2 and "invalid choice: 'eval'" in wrong.stderr


def test_frames_command_prints_every_test_view(counter_set: Path) -> None:
    import json

    from helpers import clipflow

    from clipflow.data.build import build_dataset
    from clipflow.recipe import load_recipe

    listed = counter_set / "all.lst"
    overrides = json.dumps({"data": {"test_clips": 4, "test_crops": 3}})
    done = clipflow(
        "data", "frames", str(listed), "--recipe", "slowfast_tiny_synthetic", "--mode", "test", "--overrides", overrides
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 12 * len(LENGTHS)
    ds = build_dataset(load_recipe("slowfast_tiny_synthetic", json.loads(overrides)), listed, counter_set, "test", 0)
    for index, path in enumerate(LENGTHS):
        views = [r for r in lines if r["path"] == path]
        assert [(v["view"]["clip"], v["view"]["crop"]) for v in views] == [(c, k) for c in range(4) for k in range(3)]
        for record, plan in zip(views, ds.plans(index), strict=True):
            assert (record["fast"], record["slow"]) == (plan.fast, plan.slow)
            assert tuple(record["crop"].values()) == plan.box and record["flip"] is False
        assert len({v["crop"]["left"] for v in views}) == 3  # left, centre, right of the landscape frame
