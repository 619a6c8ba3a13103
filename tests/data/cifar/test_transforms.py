"""clipflow.data.cifar.transforms through the dataset's items: the validation view, the training rule
computed again with numpy, draws from (seed, epoch, index) only, normalisation, and ImageSpec's checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cifar_helpers import GLUONCV, NUM_TRAIN, NUM_VAL, PADDED, RECIPE_SPECS, images_of, stored_images

from clipflow.data.cifar.transforms import ImageSpec, normalize_images
from clipflow.errors import ClipflowError


def test_val_items_are_the_stored_images(small_cifar):
    stored, labels = stored_images(small_cifar / "batches", "val")
    for spec in (ImageSpec(), GLUONCV):  # the padding is a training augmentation only
        for mode in ("val", "test"):
            dataset = images_of(small_cifar, "val", spec, mode)
            assert len(dataset) == NUM_VAL and dataset.mode == "val"
            for i in range(NUM_VAL):
                image, label = dataset[i]
                assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
                assert isinstance(label, int) and label == labels[i]
                np.testing.assert_array_equal(image.numpy(), stored[i])
    centre = images_of(small_cifar, "val", PADDED)
    np.testing.assert_array_equal(centre[3][0].numpy(), stored[3][:, 2:30, 2:30])  # MXNet: (32 - 28) // 2
    odd = images_of(small_cifar, "val", ImageSpec(crop_size=27, padding=2))
    np.testing.assert_array_equal(odd[3][0].numpy(), stored[3][:, 2:29, 2:29])  # (32 - 27) // 2 rounds down


def test_default_training_is_the_whole_image_as_cifar10_dist(small_cifar):
    stored, labels = stored_images(small_cifar / "batches", "train")
    dataset = images_of(small_cifar, "train")
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
def test_train_items_follow_the_rule_computed_with_numpy(small_cifar, recipe):
    spec = RECIPE_SPECS[recipe]
    stored, labels = stored_images(small_cifar / "batches", "train")
    dataset = images_of(small_cifar, "train", spec, seed=11)
    for epoch in (0, 4):
        dataset.set_epoch(epoch)
        for i in range(0, NUM_TRAIN, 7):
            image, label = dataset[i]
            assert image.shape == (3, spec.crop_size, spec.crop_size) and image.is_contiguous()
            np.testing.assert_array_equal(image.numpy(), numpy_view(stored[i], spec, 11, epoch, i))
            assert label == labels[i]


def test_train_items_depend_on_seed_epoch_and_index_only(small_cifar):
    one, two = images_of(small_cifar, "train", PADDED, seed=2), images_of(small_cifar, "train", PADDED, seed=2)
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
    other_seed = images_of(small_cifar, "train", PADDED, seed=3)
    other_seed.set_epoch(5)
    assert sum(not torch.equal(first[i], other_seed[i][0]) for i in range(NUM_TRAIN)) >= NUM_TRAIN // 2
    assert torch.equal(one[-1][0], one[NUM_TRAIN - 1][0])


def test_train_draws_cover_every_offset_and_both_flips(small_cifar):
    dataset = images_of(small_cifar, "train", PADDED)
    views = []
    for epoch in range(40):
        dataset.set_epoch(epoch)
        views += [dataset.plan(i) for i in range(NUM_TRAIN)]
    assert {v.top for v in views} == set(range(13)) == {v.left for v in views}  # 0 .. 40 - 28
    flips = sum(v.flip for v in views) / len(views)
    assert 0.45 < flips < 0.55
    assert {v.padding for v in views} == {4}


@pytest.mark.parametrize("recipe", list(RECIPE_SPECS))
def test_normalize_is_x_over_255_less_mean_over_std(small_cifar, recipe):
    spec = RECIPE_SPECS[recipe]
    dataset = images_of(small_cifar, "val", spec)
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


def test_normalize_with_the_gluoncv_mean_and_std_within_1e6(small_cifar):
    dataset = images_of(small_cifar, "val", GLUONCV)
    batch = torch.stack([dataset[i][0] for i in range(8)])
    expected = (batch.double() / 255 - torch.tensor(GLUONCV.mean).view(3, 1, 1)) / torch.tensor(GLUONCV.std).view(
        3, 1, 1
    )
    assert (dataset.normalize(batch).double() - expected).abs().max().item() < 1e-6


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [("crop_size", 33, "input_size"), ("crop_size", 0, "input_size"), ("padding", -1, "padding"),
     ("pad_value", 256, "pad_value"), ("random_flip", 1, "random_flip"), ("std", (1, 0, 1), "std")],
)  # fmt: skip
def test_image_spec_refuses_bad_settings(field, value, key):
    """Messages name the recipe's data key (the crop is the recipe's input_size)."""
    with pytest.raises(ClipflowError, match=f"data.{key} must"):
        ImageSpec(**{field: value})
