"""Labels are class indices, 0 to num_classes - 1: a label that is not one is a problem of the list, named with
its file, line, the label and the class count, before any video is decoded; never "no train video could be
decoded", and a list numbered from 1 never trains on shifted labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_refused, clipflow

from clipflow.data.build import build_dataset
from clipflow.data.listfile import read_list
from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe


def scan(tmp_path: Path, train: str, val: str = "v.mp4 0\n", num_classes: int = 3):
    """``data scan`` of the given list texts (no video exists: a list refused for its labels never gets that far)."""
    (tmp_path / "train.txt").write_text(train)
    (tmp_path / "val.txt").write_text(val)
    return clipflow("data", "scan", "--train-list", str(tmp_path / "train.txt"), "--val-list",
                    str(tmp_path / "val.txt"), "--root", str(tmp_path), "--num-classes", str(num_classes),
                    "--out-dir", str(tmp_path / "index"))  # fmt: skip


def test_a_label_equal_to_the_class_count_is_named_with_the_count(tmp_path: Path) -> None:
    done = scan(tmp_path, "a.mp4 0\nb.mp4 1\nc.mp4 3\nd.mp4 2\n")
    line = assert_refused(done, f"{tmp_path / 'train.txt'} line 3: label 3", "num_classes 3", "0..2")
    assert "could be decoded" not in line and "set num_classes" in line and "to 4" in line
    assert not (tmp_path / "index").exists()


def test_a_list_numbered_from_1_is_named_as_such(tmp_path: Path) -> None:
    done = scan(tmp_path, "a.mp4 1\nb.mp4 2\nc.mp4 3\nd.mp4 1\n")
    assert_refused(done, f"{tmp_path / 'train.txt'} line 3: label 3", "numbered from 1", "subtract 1")
    assert not (tmp_path / "index").exists()  # refused before the scan made anything


def test_a_val_list_numbered_from_1_is_named_too(tmp_path: Path) -> None:
    done = scan(tmp_path, "a.mp4 0\nb.mp4 1\nc.mp4 2\n", val="x.mp4 1\ny.mp4 2\nz.mp4 3\n")
    assert_refused(done, f"{tmp_path / 'val.txt'} line 3: label 3", "numbered from 1")


def test_a_high_label_in_a_list_without_label_0_hints_at_numbering_from_1(tmp_path: Path) -> None:
    done = scan(tmp_path, "a.mp4 1\nb.mp4 3\nc.mp4 5\n")
    line = assert_refused(done, "line 2: label 3 is out of range for num_classes 3", "1 more line(s)")
    assert "no label is 0" in line


def test_a_negative_label_is_named(tmp_path: Path) -> None:
    assert_refused(scan(tmp_path, "a.mp4 0\nb.mp4 -1\n"), f"{tmp_path / 'train.txt'} line 2: label -1 is out of range")


def test_the_training_dataset_checks_its_labels_against_the_recipe(tmp_path: Path) -> None:
    recipe = load_recipe("slowfast_tiny_synthetic")
    classes = recipe["model"]["num_classes"]
    listed = tmp_path / "train.lst"
    listed.write_text("".join(f"v{label}.mp4 32 {label}\n" for label in range(1, classes + 1)))
    with pytest.raises(ClipflowError, match=f"line {classes}: label {classes}: the list is numbered from 1"):
        build_dataset(recipe, listed, tmp_path, "train", 0)
    assert [e.label for e in read_list(listed)] == list(range(1, classes + 1))  # without a class count: no check
