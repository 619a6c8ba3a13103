"""clipflow.data.cifar.index: list lines that name images, and index_cifar's lists, classes and counts;
a missing or damaged file a ClipflowError naming it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from cifar_helpers import NUM_TRAIN, NUM_VAL, copy_folder, random_images, stored_images

from clipflow.data.cifar.batches import CIFAR10_CLASSES, read_batch, write_batch, write_meta
from clipflow.data.cifar.index import index_cifar
from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.errors import ClipflowError


def test_list_files_take_image_paths_as_they_are(tmp_path):
    entries = [VideoEntry("data_batch_1#17", 6, 1), VideoEntry("test_batch#0", 0, 1)]
    write_list(tmp_path / "x.lst", entries)
    assert (tmp_path / "x.lst").read_text() == "data_batch_1#17 1 6\ntest_batch#0 1 0\n"
    assert read_list(tmp_path / "x.lst") == [
        VideoEntry("data_batch_1#17", 6, 1, 1),
        VideoEntry("test_batch#0", 0, 1, 2),
    ]


def test_index_cifar_writes_the_lists_classes_and_counts(small_cifar):
    summary = index_cifar(small_cifar / "batches", small_cifar / "lists2")
    lists = small_cifar / "lists2"
    train_lines = (lists / "train.lst").read_text().splitlines()
    val_lines = (lists / "val.lst").read_text().splitlines()
    assert len(train_lines) == NUM_TRAIN and len(val_lines) == NUM_VAL
    _, first_labels = read_batch(small_cifar / "batches" / "data_batch_1")
    _, val_labels = read_batch(small_cifar / "batches" / "test_batch")
    assert train_lines[0] == f"data_batch_1#0 1 {first_labels[0]}"
    assert train_lines[12] == f"data_batch_2#0 1 {read_batch(small_cifar / 'batches' / 'data_batch_2')[1][0]}"
    assert train_lines[-1] == f"data_batch_5#11 1 {read_batch(small_cifar / 'batches' / 'data_batch_5')[1][11]}"
    assert val_lines == [f"test_batch#{i} 1 {v}" for i, v in enumerate(val_labels)]
    assert (lists / "classes.txt").read_text().splitlines() == list(CIFAR10_CLASSES)

    assert summary["classes"] == list(CIFAR10_CLASSES)
    assert summary["train"]["images"] == NUM_TRAIN and summary["val"]["images"] == NUM_VAL
    assert summary["train"]["files"] == {f"data_batch_{n}": 12 for n in range(1, 6)}
    assert summary["val"]["files"] == {"test_batch": NUM_VAL}
    _, train_labels = stored_images(small_cifar / "batches", "train")
    counts = np.bincount(train_labels, minlength=10)
    assert summary["train"]["per_class"] == {n: int(c) for n, c in zip(CIFAR10_CLASSES, counts, strict=True)}
    assert list(summary["val"]["per_class"].values()) == [2] * 10
    assert summary["lists"] == {
        "train": str(lists / "train.lst"),
        "val": str(lists / "val.lst"),
        "classes": str(lists / "classes.txt"),
    }
    assert len(read_list(lists / "train.lst", 10)) == NUM_TRAIN


def test_index_cifar_orders_batches_by_number(tmp_path):
    images, labels = random_images(3, 4)
    write_meta(tmp_path / "batches.meta")
    for n in (10, 2, 1):
        write_batch(tmp_path / f"data_batch_{n}", images, labels)
    write_batch(tmp_path / "test_batch", images, labels)
    (tmp_path / "data_batch_1.bak").write_text("ignored")
    summary = index_cifar(tmp_path, tmp_path / "lists")
    assert list(summary["train"]["files"]) == ["data_batch_1", "data_batch_2", "data_batch_10"]


@pytest.mark.parametrize(
    ("damage", "named", "reason"),
    [
        ("no folder", "", "does not exist"),
        ("no data_batch", "", "no data_batch_N files"),
        ("no test_batch", "test_batch", "does not exist"),
        ("no meta", "batches.meta", "does not exist"),
        ("truncated data_batch_3", "data_batch_3", "not a CIFAR-10 python pickle"),
        ("label 12 in test_batch", "test_batch", "label 12"),
    ],
)
def test_index_cifar_names_what_is_wrong(small_cifar, tmp_path, damage, named, reason):
    folder = copy_folder(small_cifar / "batches", tmp_path / "batches")
    if damage == "no folder":
        folder = tmp_path / "missing"
    elif damage == "no data_batch":
        for n in range(1, 6):
            (folder / f"data_batch_{n}").unlink()
    elif damage.startswith("no "):
        (folder / named).unlink()
    elif damage.startswith("truncated"):
        (folder / named).write_bytes((folder / named).read_bytes()[:300])
    else:
        images, labels = read_batch(folder / named)
        batch = {b"data": images.reshape(len(images), 3072), b"labels": [12] + list(map(int, labels[1:]))}
        (folder / named).write_bytes(pickle.dumps(batch))
    with pytest.raises(ClipflowError, match=reason) as info:
        index_cifar(folder, tmp_path / "lists")
    assert str(folder / named) in str(info.value)
