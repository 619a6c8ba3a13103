"""Videos re-encoded to a recipe's clips (data.reencode.match_recipe): only the frames the clips read are kept,
and the sampler maps the recipe onto them (ClipSpec.on_every), so each clip reads the frames the recipe's would."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from reencode_helpers import frame_number, write_counter_video

from clipflow.data.build import build_dataset
from clipflow.data.reader import PyAVReader, read_frames
from clipflow.data.reencode import JOURNAL, ReencodeSpec, reencode_tree
from clipflow.data.sampling import ClipSpec, slowfast_indices
from clipflow.errors import ClipflowError
from clipflow.recipe import fit_to_videos, load_recipe

SPECS = [ClipSpec(64, 1, 1, 2, 16), ClipSpec(32, 1, 1, 2, 8), ClipSpec(32, 2, 2, 2, 8), ClipSpec(30, 1, 1, 4, 8)]


@pytest.mark.parametrize(
    "clip",
    SPECS,
    ids=lambda c: f"{c.new_length}x{c.new_step}-{c.num_segments}seg-{c.fast_temporal_stride}/{c.slow_temporal_stride}",
)
def test_each_clip_on_the_kept_frames_is_a_clip_of_the_recipe_frame_for_frame(clip):
    """Every start the mapped spec draws reads, times d, the recipe's clip starting (fast - 1) x new_step frames
    before it: fast and slow. Only the last start differs, where GluonCV's walk stops short of the last frame."""
    d = clip.frame_step
    kept = clip.on_every(d)
    for frames in (150, 299, 300, 301):
        on_kept = len(range(0, frames, d))
        differ = []
        for start in range(1, on_kept - kept.skip_length + 2):
            fast, slow = slowfast_indices(np.array([start] * clip.num_segments), on_kept, kept)
            first = d * (start - 1) - (clip.fast_temporal_stride - 1) * clip.new_step  # the recipe's, 0-based
            if first < 0:
                continue
            want = slowfast_indices(np.array([first + 1] * clip.num_segments), frames, clip)
            if ([d * f for f in fast], [d * f for f in slow]) != want:
                differ.append(start)
        assert differ == [on_kept - kept.skip_length + 1], (frames, differ)


def test_a_clip_that_reads_other_frames_than_the_videos_keep_is_refused_by_name():
    jittered = ClipSpec(32, 2, 1, 2, 8, temporal_jitter=True)
    assert jittered.frame_step == 1 and jittered.on_every(1) is jittered
    with pytest.raises(ClipflowError) as err:
        jittered.on_every(4)
    assert str(err.value) == (
        "clip sampling: the videos keep one frame in 4 of the rate the recipe is written for, but its clips read "
        "one in 1 with temporal jitter (fast_temporal_stride 2 x new_step 2): re-encode them for this recipe "
        "(data.reencode.match_recipe) or without it"
    )


@pytest.fixture(scope="module")
def matched(tmp_path_factory) -> tuple[Path, ReencodeSpec, list]:
    """A 30 fps video of 60 numbered frames under src/, re-encoded matched to the tiny recipe under out/."""
    root = tmp_path_factory.mktemp("matched")
    (root / "src").mkdir()
    write_counter_video(root / "src" / "v.mp4", 96, 64, 60, fps=30)
    spec = ReencodeSpec(short_side=64).matched(ClipSpec.from_recipe(load_recipe("slowfast_tiny_synthetic")))
    results = reencode_tree(["v.mp4"], root / "src", root / "out", spec)
    assert [r.status for r in results] == ["done"], results
    return root, spec, results


def test_the_matched_reencode_keeps_every_other_frame_with_a_keyframe_every_two(matched):
    root, spec, results = matched
    # the tiny recipe: 32 frames at fast stride 2, so 16 kept frames a clip, a keyframe every 16 // 10 + 1
    assert (spec.frame_step, spec.keyframe_interval, spec.output_rate) == (2, 2, 15)
    assert results[0].frames == 30
    reader = PyAVReader(root / "out" / "v.mp4", 96, 64)
    try:
        assert reader.table.keys == list(range(0, 30, 2))
        shown = reader.get(list(range(30)))
    finally:
        reader.close()
    assert [frame_number(p) for p in shown] == list(range(0, 60, 2))
    record = json.loads((root / "out" / JOURNAL).read_text().splitlines()[0])
    assert record["spec"]["frame_step"] == 2 and record["frames"] == 30


def test_training_and_evaluation_read_the_recipes_frames_from_the_matched_videos(matched, tmp_path):
    root, _, _ = matched
    recipe = load_recipe("slowfast_tiny_synthetic")
    fitted = fit_to_videos(recipe, root / "out", "recipe slowfast_tiny_synthetic")
    assert fitted["data"]["videos_keep_every"] == 2 and fit_to_videos(recipe, root / "src", "r") is recipe
    listed = tmp_path / "train.lst"
    listed.write_text("v.mp4 30 3\n")
    for mode in ("train", "test"):
        dataset = build_dataset(fitted, listed, root / "out", mode, seed=5)
        for plan in dataset.plans(0):  # 16 frames in a row (GluonCV's walk repeats the last but one at the end)
            start = plan.offsets[0] - 1
            assert plan.fast[:15] == list(range(start, start + 15)) and plan.slow == plan.fast[3::4], plan
            numbers = [frame_number(p) for p in read_frames(root / "out" / "v.mp4", plan.fast, 96, 64)]
            assert numbers == [2 * f for f in plan.fast], (mode, plan.offsets)  # the source's frames, every 2nd


def test_a_folder_of_videos_kept_at_two_steps_or_a_recipe_they_do_not_fit_is_refused(matched, tmp_path):
    root, _, _ = matched
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    lines = (root / "out" / JOURNAL).read_text().splitlines()
    other = {**json.loads(lines[0]), "dst": "w.mp4"}
    del other["spec"]["frame_step"]  # a record of an unmatched re-encode: step 1
    (mixed / JOURNAL).write_text(f"{lines[0]}\n{json.dumps(other)}\n")
    recipe = load_recipe("slowfast_tiny_synthetic")
    with pytest.raises(ClipflowError) as err:
        fit_to_videos(recipe, mixed, "recipe slowfast_tiny_synthetic")
    assert str(err.value) == (
        f"{mixed / JOURNAL} records videos re-encoded with frame steps [1, 2]: a clip cannot be sampled the same "
        "way on all of them; re-encode every video of the folder with one setting, or give each setting a folder of "
        "its own (data.dir)"
    )
    jittered = load_recipe("slowfast_tiny_synthetic", {"data": {"new_step": 2, "temporal_jitter": True}})
    with pytest.raises(ClipflowError) as err:
        fit_to_videos(jittered, root / "out", "recipe slowfast_tiny_synthetic with overrides")
    assert str(err.value).startswith(
        f"recipe slowfast_tiny_synthetic with overrides on the videos of {root / 'out'}: clip sampling: the videos "
        "keep one frame in 2 of the rate the recipe is written for, but its clips read one in 1 with temporal jitter"
    )


def test_a_recipe_whose_step_is_fit_at_train_launch_is_refused_a_matched_reencode():
    """data.fit_step may lower new_step when training starts, to clips reading frames a re-encode matched to the
    recipe's step dropped: refused where the config enters (common.smk reads the spec through matched_to_recipe)."""
    spec = ReencodeSpec()
    fit = load_recipe("slowfast_tiny_synthetic", {"data": {"fit_step": True, "new_step": 2}})
    with pytest.raises(ClipflowError) as refused:
        spec.matched_to_recipe(fit)
    for name in ("match_recipe keeps one frame in 4 (fast_temporal_stride x new_step 2)", "data.fit_step may lower",
                 "set data.fit_step false, or match_recipe false"):  # fmt: skip
        assert name in str(refused.value)
    plain = load_recipe("slowfast_tiny_synthetic", {"data": {"fit_step": True}})  # new_step 1: nothing to lower
    assert spec.matched_to_recipe(plain) == spec.matched(ClipSpec.from_recipe(plain))
