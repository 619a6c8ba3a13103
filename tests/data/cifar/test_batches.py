"""clipflow.data.cifar.batches on real files: the CIFAR-10 python format written and read back as
cifar.html's reader sees it; every broken batch or meta file a ClipflowError naming it, and no pickled
code run."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from cifar_helpers import random_images

from clipflow.data.cifar.batches import CIFAR10_CLASSES, read_batch, read_label_names, write_batches
from clipflow.errors import ClipflowError


def unpickle(path: Path) -> dict:
    """The reader of https://www.cs.toronto.edu/~kriz/cifar.html."""
    with path.open("rb") as fo:
        return pickle.load(fo, encoding="bytes")


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
