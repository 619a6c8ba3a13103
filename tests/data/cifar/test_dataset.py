"""clipflow.data.cifar.dataset: CifarImages in loaders (workers, pickling) and every broken list line or
batch file a ClipflowError naming the list line."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from cifar_helpers import NUM_TRAIN, NUM_VAL, PADDED, copy_folder, images_of

from clipflow.data.cifar.batches import read_batch
from clipflow.data.cifar.dataset import CifarImages
from clipflow.data.loader import make_loader
from clipflow.errors import ClipflowError


def loader_batches(dataset: CifarImages, workers: int, epochs: list[int]) -> list[list[tuple]]:
    loader = make_loader(dataset, 4, None, workers=workers)
    out = []
    for epoch in epochs:
        dataset.set_epoch(epoch)
        out.append([tuple(batch) for batch in loader])
    return out


def test_loader_with_two_workers_gives_the_same_batches_as_none(small_cifar):
    single = loader_batches(images_of(small_cifar, "train", PADDED, seed=1), 0, [0, 1])
    multi = loader_batches(images_of(small_cifar, "train", PADDED, seed=1), 2, [0, 1])
    assert len(single[0]) == NUM_TRAIN // 4
    for a_epoch, b_epoch in zip(single, multi, strict=True):
        for (a_images, a_labels), (b_images, b_labels) in zip(a_epoch, b_epoch, strict=True):
            assert a_images.shape == (4, 3, 28, 28) and a_images.dtype == torch.uint8
            assert torch.equal(a_images, b_images) and torch.equal(a_labels, b_labels)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(single[0], single[1], strict=True))


def test_dataset_pickles_without_its_batch_files(small_cifar):
    dataset = images_of(small_cifar, "train", PADDED)
    empty = len(pickle.dumps(dataset))
    _ = dataset[0], dataset[NUM_TRAIN - 1]
    assert len(dataset._cache) == 2
    assert len(pickle.dumps(dataset)) == empty
    copy = pickle.loads(pickle.dumps(dataset))
    assert torch.equal(copy[5][0], dataset[5][0])


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("data_batch_1 1 3", "not a CIFAR image"),
        ("data_batch_1#x 1 3", "not a CIFAR image"),
        ("#17 1 3", "no entries"),  # a comment line, so the list is empty
        ("data_batch_1#3 5 3", "frame count 5"),
        ("data_batch_9#0 1 3", "data_batch_9 does not exist"),
        ("data_batch_1#0 1 10", "label 10 is out of range"),
    ],
)
def test_a_broken_list_line_is_named_when_the_dataset_is_made(small_cifar, tmp_path, line, reason):
    good = (small_cifar / "lists" / "val.lst").read_text().splitlines()[0]
    path = write_lines(tmp_path / "bad.lst", [line] if line.startswith("#") else [good, line])
    with pytest.raises(ClipflowError, match=reason) as info:
        CifarImages(path, small_cifar / "batches", "train")
    assert str(path) in str(info.value)
    if not line.startswith("#"):
        assert "line 2" in str(info.value)


def test_a_list_line_past_its_batch_or_of_another_label_is_named_when_read(small_cifar, tmp_path):
    _, labels = read_batch(small_cifar / "batches" / "data_batch_2")
    lines = [
        f"data_batch_2#0 1 {labels[0]}",
        f"data_batch_2#12 1 {labels[0]}",
        f"data_batch_2#1 1 {(labels[1] + 1) % 10}",
    ]
    dataset = CifarImages(write_lines(tmp_path / "bad.lst", lines), small_cifar / "batches", "val")
    assert dataset[0][1] == labels[0]
    with pytest.raises(ClipflowError, match=r"bad.lst line 2: .*data_batch_2 has 12 images, no image 12"):
        dataset[1]
    with pytest.raises(
        ClipflowError, match=rf"bad.lst line 3: label {(labels[1] + 1) % 10}, but image 1 of .*data_batch_2"
    ):
        dataset[2]


def test_a_damaged_batch_file_is_named_with_the_list_line(small_cifar, tmp_path):
    folder = copy_folder(small_cifar / "batches", tmp_path / "batches")
    (folder / "test_batch").write_bytes(b"garbage")
    dataset = CifarImages(small_cifar / "lists" / "val.lst", folder, "val")
    with pytest.raises(ClipflowError) as info:
        dataset[4]
    message = str(info.value)
    assert str(folder / "test_batch") in message and f"{small_cifar / 'lists' / 'val.lst'} line 5" in message


def test_a_worker_error_names_the_list_line(small_cifar, tmp_path):
    _, labels = read_batch(small_cifar / "batches" / "test_batch")
    lines = [f"test_batch#{i} 1 {labels[i]}" for i in range(7)] + [f"test_batch#{NUM_VAL} 1 0"]
    dataset = CifarImages(write_lines(tmp_path / "bad.lst", lines), small_cifar / "batches", "train", spec=PADDED)
    with pytest.raises(ClipflowError, match=r"bad.lst line 8: .*test_batch has 20 images, no image 20"):
        list(make_loader(dataset, 4, None, workers=2))


def test_mode_must_be_known(small_cifar):
    with pytest.raises(ClipflowError, match="mode must be one of train, val, test"):
        images_of(small_cifar, "val", mode="eval")
