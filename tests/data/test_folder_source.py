"""The class-per-folder source (clipflow.data.datasets.folder) and what goes with it: the seeded, stratified split,
train/ and val/ subtrees, files that are no video, refusals naming the folder; the scan that names a class folder
without a readable video; class names as list labels; the number of classes from the data
(clipflow.recipe.fit_to_data); each data set's own folder (clipflow.data.datasets.source)."""

from __future__ import annotations

from pathlib import Path

import pytest
from folder_helpers import make_class_folders
from helpers import clipflow

from clipflow.config_entry import entered_config
from clipflow.data.datasets.folder import folder_lists
from clipflow.data.datasets.source import check_source, dataset_dir
from clipflow.data.scan import scan_lists
from clipflow.errors import ClipflowError
from clipflow.recipe import fit_to_data, load_recipe


def touch(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"")


def test_a_fifth_of_each_class_validates_the_same_for_the_same_seed(tmp_path):
    touch(tmp_path, *(f"{c}/{i:02d}.mp4" for c, n in (("wave", 10), ("clap", 6), ("jump", 2), ("sit", 1))
                      for i in range(n)))  # fmt: skip
    made = folder_lists(tmp_path, 0.2, seed=0)
    assert made.classes == ["clap", "jump", "sit", "wave"]  # sorted: label i is the i-th
    val = [(e.label, e.path) for e in made.lists["val"]]
    # round(n x 0.2), at least one of two or more, never all: clap 1 of 6, jump 1 of 2, sit 0 of 1, wave 2 of 10
    assert [label for label, _ in val] == [0, 1, 3, 3]
    assert sorted(e.path for s in ("train", "val") for e in made.lists[s]) == sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.mp4"))  # every video in one list  # fmt: skip
    assert folder_lists(tmp_path, 0.2, seed=0).lists == made.lists
    assert folder_lists(tmp_path, 0.2, seed=1).lists["val"] != made.lists["val"]
    assert "class(es) sit have one video: it trains, none validates" in made.notes
    # a video added to one class leaves the split of the others as it was
    touch(tmp_path, "wave/99.mp4")
    again = folder_lists(tmp_path, 0.2, seed=0)
    assert [e for e in again.lists["val"] if e.label != 3] == [e for e in made.lists["val"] if e.label != 3]


def test_train_and_val_folders_and_what_is_no_video(tmp_path):
    touch(tmp_path, "train/b/1.MKV", "train/b/deep/2.webm", "train/a/1.mp4", "train/a/notes.txt", "val/a/3.avi",
          "train/.DS_Store", "train/a/.thumb.jpg", "readme.md")  # fmt: skip
    made = folder_lists(tmp_path, 0.5)
    assert made.classes == ["a", "b"]
    assert [(e.path, e.label) for e in made.lists["train"]] == [("train/a/1.mp4", 0), ("train/b/1.MKV", 1),
                                                                ("train/b/deep/2.webm", 1)]  # fmt: skip
    assert [(e.path, e.label) for e in made.lists["val"]] == [("val/a/3.avi", 0)]
    assert made.notes == [
        "no val videos for class(es) b: they are trained, not validated",
        "left out 2 file(s) that are no video by their extension or lie beside the class folders: readme.md, "
        "train/a/notes.txt",
    ]  # hidden files are not looked at


@pytest.mark.parametrize(
    "paths, message",
    [
        (["a/1.mp4", "b/notes.txt"], "class folder {root}/b holds no video (a video is a file ending in one of "),
        (["train/a/1.mp4", "val/b/1.mp4"], "{root}/val: class folder(s) b have no counterpart in {root}/train"),
        (
            ["train/a/1.mp4", "val/a/1.mp4", "c/1.mp4"],
            "data.root {root} holds train/ and val/ beside other folders (c)",
        ),
        (["x.mp4"], "data.root {root} holds no class folder; put each class's videos in a folder named after"),
    ],
)
def test_a_tree_that_is_not_class_folders_is_refused_naming_the_folder(tmp_path, paths, message):
    touch(tmp_path, *paths)
    with pytest.raises(ClipflowError) as refused:
        folder_lists(tmp_path)
    assert message.format(root=tmp_path) in str(refused.value)


def test_a_bad_root_or_fraction_is_refused(tmp_path):
    with pytest.raises(ClipflowError, match="is not a folder; give the folder that holds one folder per class"):
        folder_lists(tmp_path / "none")
    for fraction in (0.0, 1.0, float("nan")):
        with pytest.raises(ClipflowError, match="val_fraction must be more than 0 and less than 1"):
            folder_lists(tmp_path, fraction)


def test_a_class_folder_without_a_readable_video_is_named_by_the_scan(tmp_path):
    root = tmp_path / "videos"
    make_class_folders(root, ["jump", "wave"], per_class=3, frames=20)
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        (root / "clap" / name).parent.mkdir(exist_ok=True)
        (root / "clap" / name).write_text("not a video")
    listed = clipflow("data", "lists", "--source", "folder", "--root", str(root), "--out-dir", str(tmp_path / "d"))
    assert listed.returncode == 0, listed.stderr
    assert "3 classes (from the folder names)" in listed.stdout
    scanned = clipflow("data", "scan", "--train-list", str(tmp_path / "d/train_labels.txt"), "--val-list",
                       str(tmp_path / "d/val_labels.txt"), "--classes", str(tmp_path / "d/classes.txt"), "--root",
                       str(root), "--out-dir", str(tmp_path / "d/index"), "--workers", "1")  # fmt: skip
    assert scanned.returncode == 2
    assert "class 'clap' (label 0) has no readable training video: all 2 of its videos were left out (clap/" in (
        scanned.stderr)  # fmt: skip
    assert "replace them with videos that play, or remove the class" in scanned.stderr


def test_list_labels_may_be_class_names_with_a_class_index(tmp_path):
    root = tmp_path / "videos"
    made = make_class_folders(root, ["jumping jacks", "wave"], per_class=2, frames=20)
    (tmp_path / "classes.txt").write_text("wave\njumping jacks\n")
    (tmp_path / "train.txt").write_text("wave/VID_20261000.mp4 wave\njumping jacks/VID_20261000.mp4 jumping jacks\n")
    (tmp_path / "val.txt").write_text("jumping jacks/VID_20261001.mp4 1\nwave/VID_20261001.mp4,wave\n")
    assert len(made) == 2
    lists = (tmp_path / "train.txt", tmp_path / "val.txt", root)
    scan_lists(*lists, None, tmp_path / "classes.txt", tmp_path / "index", workers=1, log=lambda line: None)
    assert [line.split(" ")[-1] for line in (tmp_path / "index/train.lst").read_text().splitlines()] == ["0", "1"]
    with pytest.raises(ClipflowError) as refused:
        scan_lists(*lists, None, None, tmp_path / "index2", workers=1)
    assert f"{tmp_path / 'train.txt'} line 1: label and frame count must be integers" in str(refused.value)
    assert "to write class names as labels, give their class index (data.classes, one name a line)" in str(
        refused.value)  # fmt: skip


def test_the_number_of_classes_comes_from_the_data_unless_the_recipe_fixes_another():
    own = load_recipe("slowfast_small_own")
    assert "num_classes" not in own["model"]
    fitted = fit_to_data(own, 4, ["a", "b", "c", "d"], "manifest.json", "recipe slowfast_small_own")
    assert (fitted["model"]["num_classes"], fitted["model"]["classes"]) == (4, ["a", "b", "c", "d"])
    assert fit_to_data(own, 3, None, "m", "r")["model"]["num_classes"] == 3 and "classes" not in own["model"]
    eight = load_recipe("slowfast_tiny_synthetic")
    with pytest.raises(ClipflowError) as refused:
        fit_to_data(eight, 4, ["a", "b", "c", "d"], "index/manifest.json", "recipe slowfast_tiny_synthetic")
    assert str(refused.value) == (
        "recipe slowfast_tiny_synthetic has model.num_classes 8 but the data has 4 classes (index/manifest.json): "
        "leave num_classes out of the recipe to take the data's, or set it to 4 (overrides: {model: {num_classes: 4}})"
    )
    named = load_recipe("slowfast_small_own", {"model": {"classes": ["a", "x", "c", "d"]}})
    with pytest.raises(ClipflowError, match="label 1 is 'x' in the recipe but 'b' in the data"):
        fit_to_data(named, 4, ["a", "b", "c", "d"], "m", "recipe r")
    with pytest.raises(ClipflowError, match="leaves model.num_classes to the data, but m does not say how many"):
        fit_to_data(own, None, None, "m", "recipe r")


def config(data: dict) -> dict:
    return entered_config({"data": data}, [], [])


def test_each_data_set_has_a_folder_of_its_own_never_the_defaults(tmp_path):
    default = config({})
    assert dataset_dir(default["data"]) == "results/data/synthetic"
    small = dataset_dir(config({"synthetic": {"num_train": 8}})["data"])
    assert small.startswith("results/data/synthetic-") and small != "results/data/synthetic"
    mine = config({"source": "folder", "root": str(tmp_path / "my videos")})["data"]
    assert dataset_dir(mine).startswith("results/data/folder-my_videos-")
    other_seed = config({"source": "folder", "root": str(tmp_path / "my videos"), "folder": {"seed": 1}})["data"]
    other_split = config({"source": "ucf101", "root": "u", "ucf101": {"annotations": "a", "split": 2}})["data"]
    first_split = config({"source": "ucf101", "root": "u", "ucf101": {"annotations": "a"}})["data"]
    folders = {dataset_dir(d) for d in (mine, other_seed, other_split, first_split)}
    assert len(folders) == 4
    assert dataset_dir({**mine, "dir": "results/data/mine"}) == "results/data/mine"  # data.dir names it


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"source": "folder"},
            "data.source is 'folder' but data.root is not set; give the folder holding one folder of videos per class",
        ),
        (
            {"source": "ucf101", "root": "u"},
            "data.source is 'ucf101' but data.ucf101.annotations is not set; give "
            "the UCF-101 video folder and the extracted ucfTrainTestlist folder",
        ),
        ({"source": "hmdb51"}, "data.root, data.hmdb51.annotations are not set"),
        ({"source": "ssv2", "root": "v"}, "data.ssv2.annotations is not set"),
    ],
)
def test_a_source_without_its_settings_is_refused_naming_them(data, message):
    with pytest.raises(ClipflowError) as refused:
        check_source(config(data)["data"])
    assert message in str(refused.value)


@pytest.mark.parametrize("bad, message", [
    ({"folder": {"val_fraction": 1}}, "data.folder.val_fraction"),
    ({"ucf101": {"split": 4}}, "data.ucf101.split"),
    ({"source": "ucf-101"}, "data.source"),
])  # fmt: skip
def test_a_bad_setting_of_a_source_is_refused_by_the_schema(bad, message):
    with pytest.raises(ClipflowError, match=message):
        config(bad)
