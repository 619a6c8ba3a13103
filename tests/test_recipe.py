"""What a recipe says that the schema alone cannot check, refused when the recipe is loaded (so before any
stage): numbers that are not finite, crops larger than the frames, spans no video holds, names that leave
recipes/ (issue 17)."""

from __future__ import annotations

import pytest
from helpers import assert_refused, clipflow_here

from clipflow.errors import ClipflowError
from clipflow.recipe import RECIPES_DIR, check_span_in_lists, load_recipe

TINY = "slowfast_tiny_synthetic"  # frames decoded at 84x64, crops of 64, a span of 32 frames, slow stride 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train": {"base_lr": float("nan")}}, "train.base_lr: nan is not a finite number"),
        ({"train": {"wd": float("inf")}}, "train.wd: inf is not a finite number"),
        ({"data": {"input_size": 65}}, "data.input_size 65 does not fit in the decoded 84x64 frame"),
        ({"data": {"new_width": 48}}, "data.input_size 64 does not fit in the decoded 48x64 frame"),
        ({"data": {"new_length": 100000}}, "data.new_length: 100000 is greater than the maximum of 1024"),
        ({"data": {"new_length": 4}}, "data.new_length 4 gives the slow pathway no frame"),
    ],
)
def test_a_bad_recipe_setting_is_named_with_its_value(overrides, message):
    with pytest.raises(ClipflowError) as err:
        load_recipe(TINY, overrides)
    assert message in str(err.value)


@pytest.mark.parametrize("name", ["..", "../recipes/slowfast_tiny_synthetic", "sub/dir", ".hidden"])
def test_a_recipe_name_that_leaves_recipes_is_refused(name):
    with pytest.raises(ClipflowError, match=f"recipe '{name}' is not a recipe name"):
        load_recipe(name)


def test_a_recipe_file_given_by_its_path_is_still_taken(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text((RECIPES_DIR / f"{TINY}.yaml").read_text())
    assert load_recipe(str(own))["data"]["new_length"] == 32


def test_a_span_longer_than_every_listed_video_is_refused(tmp_path):
    short = tmp_path / "val.lst"
    short.write_text("a.mp4 20 0\nb.mp4 31 1\n")
    recipe = load_recipe(TINY)
    with pytest.raises(ClipflowError, match=rf"a clip spans 32 frames .* the longest video in {short} has 31"):
        check_span_in_lists(recipe, [short], "the recipe")
    short.write_text("a.mp4 20 0\nb.mp4 32 1\n")
    check_span_in_lists(recipe, [short], "the recipe")  # one video holds it: the others repeat frames, as GluonCV's


def test_the_command_line_refuses_a_non_finite_override_and_a_recipe_outside_recipes(tmp_path, capsys):
    listed = tmp_path / "train.lst"
    listed.write_text("a.mp4 40 0\n")
    nan = clipflow_here(capsys, "data", "frames", str(listed), "--recipe", TINY, "--overrides",
                        '{"train": {"base_lr": NaN}}')  # fmt: skip
    assert_refused(nan, "train.base_lr", "nan")
    outside = clipflow_here(capsys, "data", "frames", str(listed), "--recipe", "../config")
    assert_refused(outside, "recipe '../config'")
