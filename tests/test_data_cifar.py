"""clipflow.data.cifar on real files: the CIFAR-10 python format, the synthetic set, index lists, and the
dataset's views, normalisation and loader behaviour; every broken input a ClipflowError naming its file."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from clipflow.data.cifar import (
    CIFAR10_CLASSES,
    CifarImages,
    ImageSpec,
    index_cifar,
    make_synthetic_cifar,
    normalize_images,
    read_batch,
    read_label_names,
    write_batch,
    write_batches,
    write_meta,
)
from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.data.loader import make_loader
from clipflow.errors import ClipflowError

NUM_TRAIN, NUM_VAL = 60, 20
RAW = (1 / 255, 1 / 255, 1 / 255)  # std that leaves 0..255 pixels as they are
# What each script does to the images, as ImageSpecs (sources in clipflow.data.cifar's docstring); the recipes
# must say the same (tests/test_recipes.py).
RECIPE_SPECS: dict[str, ImageSpec] = {
    # example/distributed_training/cifar10_dist.py: x / 255, nothing else
    "cifar10_dist": ImageSpec(),
    # example/gluon/image_classification.py --dataset cifar10 (example/gluon/data.py get_cifar10_iterator)
    "gluon_image_classification": ImageSpec(random_flip=True, std=RAW),
    # example/image-classification/train_cifar10.py (+ common/data.py), the "Training MXNet part 4" run;
    # without its random hue / saturation / lightness shifts
    "train_cifar10": ImageSpec(
        crop_size=28,
        padding=4,
        pad_value=127,
        random_flip=True,
        mean=(123.68 / 255, 116.779 / 255, 103.939 / 255),
        std=RAW,
    ),
    # gluon-cv scripts/classification/cifar/train_cifar10.py
    "gluoncv_train_cifar10": ImageSpec(
        padding=4, random_flip=True, mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)
    ),
}

PADDED = RECIPE_SPECS["train_cifar10"]  # crop 28 of the image padded by 4 with 127, flips
GLUONCV = RECIPE_SPECS["gluoncv_train_cifar10"]  # crop 32 of the image padded by 4 with 0, flips


def random_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n)


def unpickle(path: Path) -> dict:
    """The reader of https://www.cs.toronto.edu/~kriz/cifar.html."""
    with path.open("rb") as fo:
        return pickle.load(fo, encoding="bytes")


@pytest.fixture(scope="module")
def cifar(tmp_path_factory) -> Path:
    """A synthetic cifar-10-batches-py folder with lists/ from index_cifar."""
    root = tmp_path_factory.mktemp("cifar")
    make_synthetic_cifar(root / "batches", NUM_TRAIN, NUM_VAL, seed=5)
    index_cifar(root / "batches", root / "lists")
    return root


def images_of(cifar: Path, split: str, spec: ImageSpec | None = None, mode: str | None = None, seed: int = 0):
    return CifarImages(cifar / "lists" / f"{split}.lst", cifar / "batches", mode or split, seed, spec)


def stored_images(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split's images and labels in list order, straight from the files."""
    if split == "val":
        return read_batch(folder / "test_batch")
    parts = [read_batch(folder / f"data_batch_{n}") for n in range(1, 6)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


# -- the format ----------------------------------------------------------------------------------------


def test_write_read_round_trip_in_the_cifar_layout(tmp_path):
    train, train_labels = random_images(23, 0)
    val, val_labels = random_images(7, 1)
    written = write_batches(tmp_path, train, train_labels, val, val_labels, train_batches=5)
    assert [p.name for p in written] == ["batches.meta"] + [f"data_batch_{n}" for n in range(1, 6)] + ["test_batch"]

    got = [read_batch(tmp_path / f"data_batch_{n}") for n in range(1, 6)]
    assert [len(g[1]) for g in got] == [5, 5, 5, 4, 4]
    images = np.concatenate([g[0] for g in got])
    labels = np.concatenate([g[1] for g in got])
    assert images.dtype == np.uint8 and images.shape == (23, 3, 32, 32)
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(images, train)
    np.testing.assert_array_equal(labels, train_labels)
    val_got, val_got_labels = read_batch(tmp_path / "test_batch")
    np.testing.assert_array_equal(val_got, val)
    np.testing.assert_array_equal(val_got_labels, val_labels)

    # the file as cifar.html's reader sees it: bytes keys, N x 3072 rows, red plane, green, blue
    raw = unpickle(tmp_path / "data_batch_1")
    assert {b"data", b"labels", b"batch_label", b"filenames"} <= set(raw)
    assert raw[b"data"].shape == (5, 3072) and raw[b"data"].dtype == np.uint8
    assert raw[b"labels"] == [int(v) for v in train_labels[:5]]
    row = raw[b"data"][2]
    for c, y, x in [(0, 0, 0), (0, 3, 17), (1, 0, 0), (2, 31, 31), (1, 10, 5)]:
        assert row[c * 1024 + y * 32 + x] == train[2, c, y, x]
    meta = unpickle(tmp_path / "batches.meta")
    assert meta[b"label_names"] == [n.encode() for n in CIFAR10_CLASSES]
    assert read_label_names(tmp_path / "batches.meta") == list(CIFAR10_CLASSES)


def test_read_batch_reads_a_protocol_2_pickle_of_numpy_1_with_str_names(tmp_path):
    images, labels = random_images(4, 2)
    path = tmp_path / "data_batch_1"
    batch = {b"batch_label": b"x", b"labels": list(map(int, labels)), b"data": images.reshape(4, 3072)}
    raw = pickle.dumps(batch, protocol=2)
    assert b"numpy._core.multiarray" in raw
    path.write_bytes(raw.replace(b"numpy._core.", b"numpy.core."))  # numpy 1's names, as in the real files
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a DeprecationWarning for numpy.core
        got, got_labels = read_batch(path)
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(got_labels, labels)
    meta = tmp_path / "batches.meta"
    meta.write_bytes(pickle.dumps({b"label_names": list(CIFAR10_CLASSES)}, protocol=2))
    assert read_label_names(meta) == list(CIFAR10_CLASSES)


def good_batch(n: int = 4) -> dict:
    images, labels = random_images(n, 3)
    return {b"data": images.reshape(n, 3072), b"labels": [int(v) for v in labels]}


def broken(**changes) -> bytes:
    batch = good_batch()
    for key, value in changes.items():
        if value is None:
            del batch[key.encode()]
        else:
            batch[key.encode()] = value
    return pickle.dumps(batch, protocol=4)


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch EXPLOITED",))


BROKEN_BATCHES = {
    "text": (b"airplane automobile\n", "not a CIFAR-10 python pickle"),
    "truncated": (pickle.dumps(good_batch(), protocol=4)[:500], "not a CIFAR-10 python pickle"),
    "empty": (b"", "not a CIFAR-10 python pickle"),
    "a list": (pickle.dumps([1, 2, 3]), "holds a list"),
    "foreign object": (pickle.dumps({b"data": Exploit()}), "not a CIFAR-10 python pickle"),
    "no data": (broken(data=None), "no b'data'"),
    "no labels": (broken(labels=None), "no b'labels'"),
    "3000 columns": (broken(data=np.zeros((4, 3000), np.uint8)), "N x 3072 uint8"),
    "float data": (broken(data=np.zeros((4, 3072), np.float32)), "N x 3072 uint8"),
    "4-d data": (broken(data=np.zeros((4, 3, 32, 32), np.uint8)), "N x 3072 uint8"),
    "label 10": (broken(labels=[0, 1, 10, 2]), "image 2 has label 10"),
    "label -1": (broken(labels=[-1, 1, 0, 2]), "image 0 has label -1"),
    "float labels": (broken(labels=[0.5, 1.0, 0.0, 2.0]), "list of integers"),
    "too few labels": (broken(labels=[0, 1, 2]), "3 labels for 4 images"),
    "too many labels": (broken(labels=[0, 1, 2, 3, 4]), "5 labels for 4 images"),
}


@pytest.mark.parametrize("case", list(BROKEN_BATCHES))
def test_read_batch_names_the_file_of_every_broken_batch(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    content, reason = BROKEN_BATCHES[case]
    path = tmp_path / "data_batch_3"
    path.write_bytes(content)
    with pytest.raises(ClipflowError) as info:
        read_batch(path)
    assert str(path) in str(info.value)
    assert reason in str(info.value)
    assert not (tmp_path / "EXPLOITED").exists()


def test_read_batch_of_a_missing_file_names_it(tmp_path):
    with pytest.raises(ClipflowError, match=rf"{tmp_path / 'data_batch_9'} does not exist"):
        read_batch(tmp_path / "data_batch_9")


@pytest.mark.parametrize(
    ("meta", "reason"),
    [({b"num_vis": 3072}, "no b'label_names'"), ({b"label_names": [b"a"] * 9}, "9 label names")],
)
def test_read_label_names_names_the_broken_meta_file(tmp_path, meta, reason):
    path = tmp_path / "batches.meta"
    path.write_bytes(pickle.dumps(meta))
    with pytest.raises(ClipflowError, match=reason) as info:
        read_label_names(path)
    assert str(path) in str(info.value)


# -- the synthetic set ---------------------------------------------------------------------------------


def test_synthetic_set_is_deterministic_from_its_seed_and_has_every_class(tmp_path):
    first = make_synthetic_cifar(tmp_path / "a", 47, 13, seed=3)
    again = make_synthetic_cifar(tmp_path / "b", 47, 13, seed=3)
    other = make_synthetic_cifar(tmp_path / "c", 47, 13, seed=4)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert (
        read_batch(tmp_path / "a" / "test_batch")[0].tobytes() != read_batch(tmp_path / "c" / "test_batch")[0].tobytes()
    )
    assert len(other) == len(first) == 7

    for split, n in (("train", 47), ("val", 13)):
        images, labels = stored_images(tmp_path / "a", split)
        assert images.shape == (n, 3, 32, 32)
        counts = np.bincount(labels, minlength=10)
        assert counts.min() >= n // 10 and counts.max() <= n // 10 + 1
    assert read_label_names(tmp_path / "a" / "batches.meta") == list(CIFAR10_CLASSES)


def test_synthetic_set_with_few_images_writes_no_empty_batch(tmp_path):
    written = make_synthetic_cifar(tmp_path, 3, 1, seed=0)
    assert sorted(p.name for p in written) == [
        "batches.meta",
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "test_batch",
    ]
    with pytest.raises(ClipflowError, match="num_train"):
        make_synthetic_cifar(tmp_path / "none", 0, 1)


def test_synthetic_set_is_learnt_by_a_tiny_model_in_a_few_epochs(tmp_path):
    make_synthetic_cifar(tmp_path / "batches", 200, 50, seed=1)
    index_cifar(tmp_path / "batches", tmp_path / "lists")
    spec = GLUONCV
    train = CifarImages(tmp_path / "lists/train.lst", tmp_path / "batches", "train", 0, spec)
    val = CifarImages(tmp_path / "lists/val.lst", tmp_path / "batches", "val", 0, spec)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveMaxPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )  # a per-pixel colour detector: measured 0.98 after 3 epochs on seeds 0..2, chance is 0.1
    optimizer = torch.optim.Adam(net.parameters(), lr=0.02)
    for epoch in range(4):
        train.set_epoch(epoch)
        for x, y in make_loader(train, 20):
            loss = torch.nn.functional.cross_entropy(net(train.normalize(x)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        x, y = next(iter(make_loader(val, 50)))
        accuracy = (net(val.normalize(x)).argmax(1) == y).float().mean().item()
    assert accuracy >= 0.9


# -- index lists ---------------------------------------------------------------------------------------


def test_list_files_take_image_paths_as_they_are(tmp_path):
    entries = [VideoEntry("data_batch_1#17", 6, 1), VideoEntry("test_batch#0", 0, 1)]
    write_list(tmp_path / "x.lst", entries)
    assert (tmp_path / "x.lst").read_text() == "data_batch_1#17 1 6\ntest_batch#0 1 0\n"
    assert read_list(tmp_path / "x.lst") == [
        VideoEntry("data_batch_1#17", 6, 1, 1),
        VideoEntry("test_batch#0", 0, 1, 2),
    ]


def test_index_cifar_writes_the_lists_classes_and_counts(cifar):
    summary = index_cifar(cifar / "batches", cifar / "lists2")
    lists = cifar / "lists2"
    train_lines = (lists / "train.lst").read_text().splitlines()
    val_lines = (lists / "val.lst").read_text().splitlines()
    assert len(train_lines) == NUM_TRAIN and len(val_lines) == NUM_VAL
    _, first_labels = read_batch(cifar / "batches" / "data_batch_1")
    _, val_labels = read_batch(cifar / "batches" / "test_batch")
    assert train_lines[0] == f"data_batch_1#0 1 {first_labels[0]}"
    assert train_lines[12] == f"data_batch_2#0 1 {read_batch(cifar / 'batches' / 'data_batch_2')[1][0]}"
    assert train_lines[-1] == f"data_batch_5#11 1 {read_batch(cifar / 'batches' / 'data_batch_5')[1][11]}"
    assert val_lines == [f"test_batch#{i} 1 {v}" for i, v in enumerate(val_labels)]
    assert (lists / "classes.txt").read_text().splitlines() == list(CIFAR10_CLASSES)

    assert summary["classes"] == list(CIFAR10_CLASSES)
    assert summary["train"]["images"] == NUM_TRAIN and summary["val"]["images"] == NUM_VAL
    assert summary["train"]["files"] == {f"data_batch_{n}": 12 for n in range(1, 6)}
    assert summary["val"]["files"] == {"test_batch": NUM_VAL}
    _, train_labels = stored_images(cifar / "batches", "train")
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


def copy_folder(source: Path, target: Path) -> Path:
    target.mkdir()
    for p in source.iterdir():
        (target / p.name).write_bytes(p.read_bytes())
    return target


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
def test_index_cifar_names_what_is_wrong(cifar, tmp_path, damage, named, reason):
    folder = copy_folder(cifar / "batches", tmp_path / "batches")
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


# -- the dataset ---------------------------------------------------------------------------------------


def test_val_items_are_the_stored_images(cifar):
    stored, labels = stored_images(cifar / "batches", "val")
    for spec in (ImageSpec(), GLUONCV):  # the padding is a training augmentation only
        for mode in ("val", "test"):
            dataset = images_of(cifar, "val", spec, mode)
            assert len(dataset) == NUM_VAL and dataset.mode == "val"
            for i in range(NUM_VAL):
                image, label = dataset[i]
                assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
                assert isinstance(label, int) and label == labels[i]
                np.testing.assert_array_equal(image.numpy(), stored[i])
    centre = images_of(cifar, "val", PADDED)
    np.testing.assert_array_equal(centre[3][0].numpy(), stored[3][:, 2:30, 2:30])  # MXNet: (32 - 28) // 2
    odd = images_of(cifar, "val", ImageSpec(crop_size=27, padding=2))
    np.testing.assert_array_equal(odd[3][0].numpy(), stored[3][:, 2:29, 2:29])  # (32 - 27) // 2 rounds down


def test_default_training_is_the_whole_image_as_cifar10_dist(cifar):
    stored, labels = stored_images(cifar / "batches", "train")
    dataset = images_of(cifar, "train")
    dataset.set_epoch(3)
    for i in (0, 13, NUM_TRAIN - 1):
        image, label = dataset[i]
        np.testing.assert_array_equal(image.numpy(), stored[i])
        assert label == labels[i]


def numpy_view(image: np.ndarray, spec: ImageSpec, seed: int, epoch: int, index: int) -> np.ndarray:
    """The documented training rule, computed here on its own."""
    rng = np.random.default_rng([seed, epoch, index])
    slack = 32 + 2 * spec.padding - spec.crop_size
    top, left = rng.integers(0, slack + 1), rng.integers(0, slack + 1)
    flip = spec.random_flip and rng.integers(0, 2) == 1
    p = spec.padding
    padded = np.full((3, 32 + 2 * p, 32 + 2 * p), spec.pad_value, dtype=np.uint8)
    padded[:, p : p + 32, p : p + 32] = image
    out = padded[:, top : top + spec.crop_size, left : left + spec.crop_size]
    return out[:, :, ::-1] if flip else out


@pytest.mark.parametrize("recipe", ["train_cifar10", "gluoncv_train_cifar10", "gluon_image_classification"])
def test_train_items_follow_the_rule_computed_with_numpy(cifar, recipe):
    spec = RECIPE_SPECS[recipe]
    stored, labels = stored_images(cifar / "batches", "train")
    dataset = images_of(cifar, "train", spec, seed=11)
    for epoch in (0, 4):
        dataset.set_epoch(epoch)
        for i in range(0, NUM_TRAIN, 7):
            image, label = dataset[i]
            assert image.shape == (3, spec.crop_size, spec.crop_size) and image.is_contiguous()
            np.testing.assert_array_equal(image.numpy(), numpy_view(stored[i], spec, 11, epoch, i))
            assert label == labels[i]


def test_train_items_depend_on_seed_epoch_and_index_only(cifar):
    one, two = images_of(cifar, "train", PADDED, seed=2), images_of(cifar, "train", PADDED, seed=2)
    one.set_epoch(5)
    two.set_epoch(5)
    np.random.seed(0)
    torch.manual_seed(0)
    first = [one[i][0] for i in range(NUM_TRAIN)]
    np.random.seed(99)
    torch.manual_seed(99)
    assert all(torch.equal(a, two[i][0]) for i, a in enumerate(first))
    assert all(torch.equal(first[i], one[i][0]) for i in range(NUM_TRAIN))  # again, same object

    two.set_epoch(6)
    assert sum(not torch.equal(first[i], two[i][0]) for i in range(NUM_TRAIN)) >= NUM_TRAIN // 2
    other_seed = images_of(cifar, "train", PADDED, seed=3)
    other_seed.set_epoch(5)
    assert sum(not torch.equal(first[i], other_seed[i][0]) for i in range(NUM_TRAIN)) >= NUM_TRAIN // 2
    assert torch.equal(one[-1][0], one[NUM_TRAIN - 1][0])


def test_train_draws_cover_every_offset_and_both_flips(cifar):
    dataset = images_of(cifar, "train", PADDED)
    views = []
    for epoch in range(40):
        dataset.set_epoch(epoch)
        views += [dataset.plan(i) for i in range(NUM_TRAIN)]
    assert {v.top for v in views} == set(range(13)) == {v.left for v in views}  # 0 .. 40 - 28
    flips = sum(v.flip for v in views) / len(views)
    assert 0.45 < flips < 0.55
    assert {v.padding for v in views} == {4}


@pytest.mark.parametrize("recipe", list(RECIPE_SPECS))
def test_normalize_is_x_over_255_less_mean_over_std(cifar, recipe):
    spec = RECIPE_SPECS[recipe]
    dataset = images_of(cifar, "val", spec)
    batch = torch.stack([dataset[i][0] for i in range(6)]).contiguous(memory_format=torch.channels_last)
    out = dataset.normalize(batch)
    assert out.dtype == torch.float32 and out.is_contiguous() and out.shape == batch.shape
    x = batch.numpy().astype(np.float64)
    mean = np.array(spec.mean).reshape(3, 1, 1)
    std = np.array(spec.std).reshape(3, 1, 1)
    expected = (x / 255 - mean) / std
    # within 1e-6 of the values' range: raw-pixel recipes (std 1/255) give values up to 255, where float32's
    # spacing alone is 1.5e-5
    tolerance = 1e-6 * max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=tolerance)
    assert torch.equal(batch, torch.stack([dataset[i][0] for i in range(6)]))  # the input is left alone
    np.testing.assert_allclose(normalize_images(batch[0], spec).numpy(), expected[0], rtol=0, atol=tolerance)


def test_normalize_with_the_gluoncv_mean_and_std_within_1e6(cifar):
    dataset = images_of(cifar, "val", GLUONCV)
    batch = torch.stack([dataset[i][0] for i in range(8)])
    expected = (batch.double() / 255 - torch.tensor(GLUONCV.mean).view(3, 1, 1)) / torch.tensor(GLUONCV.std).view(
        3, 1, 1
    )
    assert (dataset.normalize(batch).double() - expected).abs().max().item() < 1e-6


def loader_batches(dataset: CifarImages, workers: int, epochs: list[int]) -> list[list[tuple]]:
    loader = make_loader(dataset, 4, None, workers=workers)
    out = []
    for epoch in epochs:
        dataset.set_epoch(epoch)
        out.append([tuple(batch) for batch in loader])
    return out


def test_loader_with_two_workers_gives_the_same_batches_as_none(cifar):
    single = loader_batches(images_of(cifar, "train", PADDED, seed=1), 0, [0, 1])
    multi = loader_batches(images_of(cifar, "train", PADDED, seed=1), 2, [0, 1])
    assert len(single[0]) == NUM_TRAIN // 4
    for a_epoch, b_epoch in zip(single, multi, strict=True):
        for (a_images, a_labels), (b_images, b_labels) in zip(a_epoch, b_epoch, strict=True):
            assert a_images.shape == (4, 3, 28, 28) and a_images.dtype == torch.uint8
            assert torch.equal(a_images, b_images) and torch.equal(a_labels, b_labels)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(single[0], single[1], strict=True))


def test_dataset_pickles_without_its_batch_files(cifar):
    dataset = images_of(cifar, "train", PADDED)
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
def test_a_broken_list_line_is_named_when_the_dataset_is_made(cifar, tmp_path, line, reason):
    good = (cifar / "lists" / "val.lst").read_text().splitlines()[0]
    path = write_lines(tmp_path / "bad.lst", [line] if line.startswith("#") else [good, line])
    with pytest.raises(ClipflowError, match=reason) as info:
        CifarImages(path, cifar / "batches", "train")
    assert str(path) in str(info.value)
    if not line.startswith("#"):
        assert "line 2" in str(info.value)


def test_a_list_line_past_its_batch_or_of_another_label_is_named_when_read(cifar, tmp_path):
    _, labels = read_batch(cifar / "batches" / "data_batch_2")
    lines = [
        f"data_batch_2#0 1 {labels[0]}",
        f"data_batch_2#12 1 {labels[0]}",
        f"data_batch_2#1 1 {(labels[1] + 1) % 10}",
    ]
    dataset = CifarImages(write_lines(tmp_path / "bad.lst", lines), cifar / "batches", "val")
    assert dataset[0][1] == labels[0]
    with pytest.raises(ClipflowError, match=r"bad.lst line 2: .*data_batch_2 has 12 images, no image 12"):
        dataset[1]
    with pytest.raises(
        ClipflowError, match=rf"bad.lst line 3: label {(labels[1] + 1) % 10}, but image 1 of .*data_batch_2"
    ):
        dataset[2]


def test_a_damaged_batch_file_is_named_with_the_list_line(cifar, tmp_path):
    folder = copy_folder(cifar / "batches", tmp_path / "batches")
    (folder / "test_batch").write_bytes(b"garbage")
    dataset = CifarImages(cifar / "lists" / "val.lst", folder, "val")
    with pytest.raises(ClipflowError) as info:
        dataset[4]
    message = str(info.value)
    assert str(folder / "test_batch") in message and f"{cifar / 'lists' / 'val.lst'} line 5" in message


def test_a_worker_error_names_the_list_line(cifar, tmp_path):
    _, labels = read_batch(cifar / "batches" / "test_batch")
    lines = [f"test_batch#{i} 1 {labels[i]}" for i in range(7)] + [f"test_batch#{NUM_VAL} 1 0"]
    dataset = CifarImages(write_lines(tmp_path / "bad.lst", lines), cifar / "batches", "train", spec=PADDED)
    with pytest.raises(ClipflowError, match=r"bad.lst line 8: .*test_batch has 20 images, no image 20"):
        list(make_loader(dataset, 4, None, workers=2))


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [("crop_size", 33, "input_size"), ("crop_size", 0, "input_size"), ("padding", -1, "padding"),
     ("pad_value", 256, "pad_value"), ("random_flip", 1, "random_flip"), ("std", (1, 0, 1), "std")],
)  # fmt: skip
def test_image_spec_refuses_bad_settings(field, value, key):
    """Messages name the recipe's data key (the crop is the recipe's input_size)."""
    with pytest.raises(ClipflowError, match=f"data.{key} must"):
        ImageSpec(**{field: value})


def test_mode_must_be_known(cifar):
    with pytest.raises(ClipflowError, match="mode must be one of train, val, test"):
        images_of(cifar, "val", mode="eval")
