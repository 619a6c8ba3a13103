"""Spatial transforms: GluonCV's crop rules, torchvision v2 pixels, and the test views read from real videos.

The crop boxes are checked against a reference written here from GluonCV's
VideoMultiScaleCrop / VideoCenterCrop (gluoncv/data/transforms/video.py), not from
clipflow's code. The pixels are checked against numpy arithmetic on patterned frames.
The test views are decoded from H.264 videos whose frames show their number as 8
horizontal bands (so any full-height crop can read it), with decord watched by a
counting subclass to prove each video is decoded once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as TF
from torchvision.transforms.v2 import functional as F

from clipflow.data.dataset import SlowFastClips
from clipflow.data.pixels import as_video, normalize_clips, transform_clip
from clipflow.data.sampling import ClipSpec
from clipflow.data.transforms import TransformSpec, center_crop_box, crop_size_pairs, train_crop_box
from clipflow.data.transforms import test_crop_boxes as view_boxes  # aliased: pytest would collect test_*
from clipflow.errors import ClipflowError

RATIOS = (1.0, 0.875, 0.75, 0.66)


# -- GluonCV reference ---------------------------------------------------------------------------


def gluoncv_boxes(height: int, width: int, ratios, fix_crop: bool, more_fix_crop: bool, max_distort: int = 1):
    """Every (top, left, crop_h, crop_w) VideoMultiScaleCrop can cut, straight from its fillCropSize/fillFixOffset."""
    base = min(height, width)
    pairs = []
    for i, rh in enumerate(ratios):
        for j, rw in enumerate(ratios):
            if abs(i - j) <= max_distort:
                pairs.append((int(base * rh), int(base * rw)))
    boxes = set()
    for crop_h, crop_w in pairs:
        if fix_crop:
            h_off, w_off = (height - crop_h) // 4, (width - crop_w) // 4
            spots = [(0, 0), (0, 4 * w_off), (4 * h_off, 0), (4 * h_off, 4 * w_off), (2 * h_off, 2 * w_off)]
            if more_fix_crop:
                spots += [(0, 2 * w_off), (4 * h_off, 2 * w_off), (2 * h_off, 0), (2 * h_off, 4 * w_off)]
                spots += [(h_off, w_off), (h_off, 3 * w_off), (3 * h_off, w_off), (3 * h_off, 3 * w_off)]
        else:
            spots = [(t, x) for t in range(height - crop_h + 1) for x in range(width - crop_w + 1)]
        boxes |= {(t, x, crop_h, crop_w) for t, x in spots}
    return pairs, boxes


def draw(height: int, width: int, spec: TransformSpec, n: int) -> list[tuple[int, int, int, int]]:
    return [train_crop_box(height, width, spec, np.random.default_rng([7, k])) for k in range(n)]


@pytest.mark.parametrize(("more_fix_crop", "positions"), [(True, 13), (False, 5)])
def test_fixed_multiscale_crops_are_gluoncvs_and_all_are_drawn(more_fix_crop: bool, positions: int) -> None:
    spec = TransformSpec(224, RATIOS, fix_crop=True, more_fix_crop=more_fix_crop)
    pairs, want = gluoncv_boxes(256, 340, RATIOS, True, more_fix_crop)
    assert len(pairs) == 10 and (256, 224) in pairs and (168, 168) in pairs  # int(256 * 0.66) = 168
    assert len({(t, x) for t, x, h, w in want if (h, w) == (192, 192)}) == positions
    drawn = draw(256, 340, spec, 4000)
    assert set(drawn) == want
    sizes = Counter((h, w) for _, _, h, w in drawn)  # each size pair 1/10 of the time
    assert set(sizes) == set(pairs) and all(300 < c < 500 for c in sizes.values()), sizes


def test_free_multiscale_crops_are_uniform_over_every_position() -> None:
    small = TransformSpec(8, (1.0, 0.75), fix_crop=False)
    _, want = gluoncv_boxes(12, 16, (1.0, 0.75), False, False)
    assert len(want) == 5 + 8 + 20 + 32
    drawn = draw(12, 16, small, 4000)
    assert set(drawn) == want
    spec = TransformSpec(224, RATIOS, fix_crop=False)
    _, allowed = gluoncv_boxes(256, 340, RATIOS, False, False)
    drawn = draw(256, 340, spec, 2000)
    assert set(drawn) <= allowed
    lefts = [x for _, x, h, w in drawn if (h, w) == (168, 168)]
    assert min(lefts) < 10 and max(lefts) > 340 - 168 - 10  # reaches both ends


def test_crop_sides_are_not_snapped_to_the_input_size() -> None:
    """GluonCV keeps int(short * ratio); TSN's GroupMultiScaleCrop would turn 225 (within 3 of 224) into 224."""
    spec = TransformSpec(224, (1.0, 0.875), max_distort=0)
    assert crop_size_pairs(258, 340, spec) == [(258, 258), (225, 225)]
    assert crop_size_pairs(256, 340, TransformSpec(224, (1.0, 0.5), max_distort=0)) == [(256, 256), (128, 128)]


@pytest.mark.parametrize("size", [(256, 340), (340, 256), (64, 84), (31, 31)])
@pytest.mark.parametrize("fix_crop", [True, False])
def test_every_training_crop_fits_the_frame(size: tuple[int, int], fix_crop: bool) -> None:
    height, width = size
    spec = TransformSpec(24, RATIOS, max_distort=3, fix_crop=fix_crop)
    for top, left, h, w in draw(height, width, spec, 300):
        assert 0 <= top <= height - h and 0 <= left <= width - w and h >= 1 and w >= 1


# -- pixels --------------------------------------------------------------------------------------


def pattern(frames: int, height: int, width: int) -> np.ndarray:
    """(T, H, W, C) uint8: red = 4 x row, green = 3 x column, blue = 10 x frame."""
    t, y, x = np.meshgrid(np.arange(frames), np.arange(height), np.arange(width), indexing="ij")
    return np.stack([4 * y, 3 * x, 10 * t], axis=-1).astype(np.uint8)


def normalised(pixels: np.ndarray, spec: TransformSpec) -> np.ndarray:
    """(T, H, W, C) uint8 -> (C, T, H, W) float64 ``(x / 255 - mean) / std``."""
    mean, std = np.array(spec.mean), np.array(spec.std)
    return ((pixels / 255.0 - mean) / std).transpose(3, 0, 1, 2)


def model_input(video: torch.Tensor, box, flip: bool, spec: TransformSpec, pick=None) -> torch.Tensor:
    """transform_clip's uint8 clip as the model gets it: normalize_clips of it."""
    return normalize_clips(transform_clip(video, box, flip, spec, pick), spec)


def test_clips_stay_uint8_in_frame_memory_order_until_normalised() -> None:
    frames = pattern(5, 48, 64)
    spec = TransformSpec(32)
    for box in [(6, 20, 32, 32), (0, 0, 48, 40)]:  # no resize, resize
        clip = transform_clip(as_video(frames), box, False, spec)
        assert clip.shape == (3, 5, 32, 32) and clip.dtype == torch.uint8
        assert clip.permute(1, 2, 3, 0).is_contiguous()  # (T, H, W, C) memory: no transpose in the loader
    exact = transform_clip(as_video(frames), (6, 20, 32, 32), False, spec)
    assert torch.equal(exact, torch.from_numpy(frames[:, 6:38, 20:52]).permute(3, 0, 1, 2))
    batch = torch.stack([exact, exact.flip(-1)])
    normalised_batch = normalize_clips(batch, spec)
    assert normalised_batch.dtype == torch.float32 and normalised_batch.is_contiguous()
    torch.testing.assert_close(normalised_batch[1], normalize_clips(exact, spec).flip(-1), rtol=0, atol=0)


def test_crop_and_flip_without_resize_give_the_pattern_pixels() -> None:
    frames = pattern(5, 48, 64)
    spec = TransformSpec(32, mean=(0.1, 0.5, 0.9), std=(0.2, 0.3, 0.4))
    top, left = 6, 20
    out = model_input(as_video(frames), (top, left, 32, 32), True, spec)
    assert out.shape == (3, 5, 32, 32) and out.dtype == torch.float32 and out.is_contiguous()
    want = normalised(frames[:, top : top + 32, left : left + 32][:, :, ::-1], spec)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-5)
    # the first output column after the flip is the crop's last one: green = 3 x (left + 31)
    green = out[1, 0, 0, 0] * 0.3 + 0.5
    assert round(float(green) * 255) == 3 * (left + 31)
    plain = model_input(as_video(frames), (top, left, 32, 32), False, spec)
    assert torch.equal(plain.flip(-1), out)


def test_picked_frames_are_taken_in_the_order_asked() -> None:
    frames = pattern(6, 40, 40)
    spec = TransformSpec(32)
    out = transform_clip(as_video(frames), (4, 4, 32, 32), False, spec, pick=[5, 0, 3])
    whole = transform_clip(as_video(frames), (4, 4, 32, 32), False, spec)
    assert torch.equal(out, whole[:, [5, 0, 3]])


def test_resize_is_bilinear_without_antialias_on_uint8() -> None:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(4, 60, 80, 3), dtype=np.uint8)
    unit = TransformSpec(32, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    box = (5, 10, 45, 40)
    out = model_input(as_video(frames), box, False, unit)
    assert out.shape == (3, 4, 32, 32)
    crop = frames[:, 5:50, 10:50]
    assert float(out.min()) >= crop.min() / 255 - 1e-6 and float(out.max()) <= crop.max() / 255 + 1e-6
    # the same as float bilinear with half-pixel centres (cv2 INTER_LINEAR's), up to uint8 rounding: one level,
    # whichever uint8 kernel torch picks for the CPU
    reference = TF.interpolate(
        torch.from_numpy(crop).permute(0, 3, 1, 2).double(), size=(32, 32), mode="bilinear", align_corners=False
    )
    reference = reference.permute(1, 0, 2, 3) / 255.0
    assert float((out.double() - reference).abs().max()) <= 1.0 / 255 + 1e-6
    flat = np.full((3, 50, 70, 3), 200, dtype=np.uint8)  # a flat frame stays exactly flat, up- or downscaled
    spec = TransformSpec(64)
    for crop_box in [(0, 0, 50, 50), (2, 3, 40, 30)]:
        got = model_input(as_video(flat), crop_box, False, spec)
        np.testing.assert_allclose(got.numpy(), normalised(np.full((3, 64, 64, 3), 200, np.uint8), spec), atol=1e-6)


def test_resize_commutes_with_flip() -> None:
    frames = np.random.default_rng(1).integers(0, 256, size=(3, 64, 84, 3), dtype=np.uint8)
    spec = TransformSpec(48)
    box = (0, 10, 64, 56)
    flipped = transform_clip(as_video(frames), box, True, spec)
    # exact on any CPU: transform_clip flips after the resize, so both sides resize the same pixels
    assert torch.equal(flipped, transform_clip(as_video(frames), box, False, spec).flip(-1))


def test_normalise_uses_mean_and_std_exactly() -> None:
    frames = np.random.default_rng(2).integers(0, 256, size=(2, 16, 16, 3), dtype=np.uint8)
    spec = TransformSpec(16, mean=(0.3, 0.6, 0.2), std=(0.5, 0.25, 0.125))
    out = model_input(as_video(frames), (0, 0, 16, 16), False, spec)
    np.testing.assert_allclose(out.numpy(), normalised(frames, spec), atol=1e-6)
    reference = F.normalize(F.to_dtype(torch.from_numpy(frames).permute(0, 3, 1, 2), scale=True), spec.mean, spec.std)
    torch.testing.assert_close(out, reference.permute(1, 0, 2, 3), rtol=0, atol=1e-6)


# -- validation and test crops -------------------------------------------------------------------


def gluoncv_centre(height: int, width: int, size: int) -> tuple[int, int]:
    """VideoCenterCrop: x1 = int(round((w - tw) / 2.)), y1 likewise (Python 3 rounds halves to even)."""
    return int(round((height - size) / 2.0)), int(round((width - size) / 2.0))


@pytest.mark.parametrize(("height", "width"), [(256, 340), (256, 341), (256, 343), (257, 340), (224, 224), (64, 84)])
def test_centre_crop_position_is_gluoncvs(height: int, width: int) -> None:
    size = min(224, height, width)
    box = center_crop_box(height, width, size)
    assert box == (*gluoncv_centre(height, width, size), size, size)
    frames = pattern(1, height, width)
    torchvision_crop = F.center_crop(as_video(frames), [size, size])
    top, left = box[:2]
    assert torch.equal(torchvision_crop, as_video(frames)[:, :, top : top + size, left : left + size])


def test_centre_rounding_halves_to_even() -> None:
    assert center_crop_box(256, 341, 224)[:2] == (16, 58)  # 58.5 -> 58
    assert center_crop_box(256, 343, 224)[:2] == (16, 60)  # 59.5 -> 60
    assert center_crop_box(257, 340, 224)[:2] == (16, 58)  # 16.5 -> 16


def test_three_test_crops_are_start_centre_end_of_the_long_side() -> None:
    spec = TransformSpec(224)
    assert view_boxes(256, 340, spec) == [(16, 0, 224, 224), (16, 58, 224, 224), (16, 116, 224, 224)]
    assert view_boxes(340, 256, spec) == [(0, 16, 224, 224), (58, 16, 224, 224), (116, 16, 224, 224)]
    assert view_boxes(256, 256, spec) == [(16, 0, 224, 224), (16, 16, 224, 224), (16, 32, 224, 224)]
    assert view_boxes(256, 341, spec)[1] == center_crop_box(256, 341, 224)
    assert view_boxes(256, 340, replace(spec, test_crops=1)) == [center_crop_box(256, 340, 224)]


# -- test views from real videos -----------------------------------------------------------------

WIDTH, HEIGHT, BANDS = 112, 64, 8
LENGTHS = {"long.mp4": 150, "short.mp4": 12, "tiny.mp4": 6}
CLIP = ClipSpec(new_length=8, fast_temporal_stride=2, slow_temporal_stride=4)


def band_frames(count: int) -> np.ndarray:
    """Frame t: band b (8 rows, full width) light when bit b of t is set, dark if not; both brighten to the
    right (light 128 + x, dark x / 2), so every column differs and a crop's position shows in its pixels."""
    x = np.arange(WIDTH)
    light, dark = (128 + x).astype(np.uint8), (x // 2).astype(np.uint8)
    frames = np.empty((count, HEIGHT, WIDTH, 3), dtype=np.uint8)
    rows = HEIGHT // BANDS
    for t in range(count):
        for b in range(BANDS):
            frames[t, b * rows : (b + 1) * rows] = (light if t >> b & 1 else dark)[None, :, None]
    return frames


def read_bands(clip: torch.Tensor) -> list[int]:
    """The frame number each frame of a uint8 (C, T, H, W) clip shows."""
    pixels = clip.permute(1, 2, 3, 0).float() / 255  # (T, H, W, C) in [0, 1]
    rows = HEIGHT // BANDS
    numbers = []
    for frame in pixels:
        bits = [float(frame[b * rows + 2 : (b + 1) * rows - 2].mean()) > 0.5 for b in range(BANDS)]
        numbers.append(sum(int(bit) << b for b, bit in enumerate(bits)))
    return numbers


@pytest.fixture(scope="module")
def band_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from video_helpers import numbered_set

    return numbered_set(tmp_path_factory.mktemp("bands"), LENGTHS, band_frames)


@pytest.fixture
def reader_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Counts reader constructions and reads, of decord's VideoReader and of clipflow's PyAVReader
    (the real ones still run)."""
    import decord

    from clipflow.data import reader

    calls: dict[str, list] = {"open": [], "read": []}

    class CountedDecord(decord.VideoReader):
        def __init__(self, uri, *args, **kwargs):
            calls["open"].append(uri)
            super().__init__(uri, *args, **kwargs)

        def get_batch(self, indices):
            calls["read"].append(list(indices))
            return super().get_batch(indices)

    class CountedPyAV(reader.PyAVReader):
        def __init__(self, path, *args, **kwargs):
            calls["open"].append(str(path))
            super().__init__(path, *args, **kwargs)

        def get(self, indices):
            calls["read"].append(list(indices))
            return super().get(indices)

    monkeypatch.setattr(decord, "VideoReader", CountedDecord)
    monkeypatch.setattr(reader, "PyAVReader", CountedPyAV)
    return calls


def gluoncv_test_frames(num_frames: int, segments: int, spec: ClipSpec) -> list[tuple[list[int], list[int]]]:
    """Per segment of VideoClsCustom's test sampling (_sample_test_indices), its (fast, slow) 0-based frames:
    the sampling tests' reference walk in test mode (which draws nothing at random)."""
    from video_helpers import gluoncv_reference

    fast = spec.new_length // spec.fast_temporal_stride
    walk = gluoncv_reference(num_frames, replace(spec, num_segments=segments), "test", None)
    return [(segment[:fast], segment[fast:]) for segment in walk]


@pytest.mark.parametrize("decoder", ["pyav", "decord"])
def test_test_views_are_clips_times_crops_decoded_once(
    band_set: Path, reader_calls: dict[str, list], decoder: str
) -> None:
    spec = TransformSpec(64, test_clips=10, test_crops=3)
    ds = SlowFastClips(band_set / "all.lst", band_set, CLIP, spec, WIDTH, HEIGHT, "test", decoder=decoder)
    assert ds.views == 30
    for index, entry in enumerate(ds.entries):
        plans = ds.plans(index)
        want = gluoncv_test_frames(entry.num_frames, 10, CLIP)
        assert [(p.clip_index, p.crop_index) for p in plans] == [(i, j) for i in range(10) for j in range(3)]
        assert [(p.fast, p.slow) for p in plans] == [clip for clip in want for _ in range(3)]
        assert [p.box for p in plans[:3]] == [(0, 0, 64, 64), (0, 24, 64, 64), (0, 48, 64, 64)]  # left, centre, right
        assert all(p.box == plans[k % 3].box and not p.flip for k, p in enumerate(plans))

        reader_calls["open"].clear()
        reader_calls["read"].clear()
        slow, fast, label = ds[index]
        union = sorted({f for p in plans for f in p.fast + p.slow})
        assert len(reader_calls["open"]) == 1 and reader_calls["read"] == [union]
        assert label == entry.label
        assert slow.shape == (30, 3, 2, 64, 64) and fast.shape == (30, 3, 4, 64, 64)

        # the whole video read by the same decoder: the same decoding and YUV-to-RGB conversion as the item's, so the
        # pixels can be compared exactly (PyAV's and decord's conversions may differ by a level, by CPU)
        frames = ds._read(entry, list(range(entry.num_frames)))
        assert frames.shape == (entry.num_frames, HEIGHT, WIDTH, 3)
        for v, plan in enumerate(plans):
            assert read_bands(fast[v]) == plan.fast, (entry.path, v)
            assert read_bands(slow[v]) == plan.slow, (entry.path, v)
            top, left, h, w = plan.box
            expected = normalised(frames[plan.fast, top : top + h, left : left + w], spec)
            np.testing.assert_allclose(normalize_clips(fast[v], spec).numpy(), expected, atol=1e-5)
        assert not torch.equal(fast[0], fast[1]) and not torch.equal(fast[1], fast[2])  # three places
    assert ds.plans(1)[-1].offsets == [5]  # 12 frames: tick (12 - 8 + 1) / 10, clip 9 at int(0.25 + 4.5) + 1
    assert all(p.offsets == [1] and p.fast == [1, 3, 4, 4] for p in ds.plans(2))  # shorter than the span


def test_one_test_view_is_the_validation_clip(band_set: Path) -> None:
    one = TransformSpec(64, test_clips=1, test_crops=1)
    test = SlowFastClips(band_set / "all.lst", band_set, CLIP, one, WIDTH, HEIGHT, "test")
    val = SlowFastClips(band_set / "all.lst", band_set, CLIP, one, WIDTH, HEIGHT, "val")
    for index in range(len(val)):
        t_slow, t_fast, _ = test[index]
        v_slow, v_fast, _ = val[index]
        assert t_slow.shape[0] == 1 and torch.equal(t_slow[0], v_slow) and torch.equal(t_fast[0], v_fast)
        assert test.plan(index) == val.plan(index)


def test_test_clips_with_segments_interleave_the_chunks(band_set: Path) -> None:
    clip = replace(CLIP, num_segments=2)
    spec = TransformSpec(64, test_clips=3, test_crops=1)
    ds = SlowFastClips(band_set / "all.lst", band_set, clip, spec, WIDTH, HEIGHT, "test")
    chunks = gluoncv_test_frames(150, 6, clip)  # 3 clips x 2 segments
    plans = ds.plans(0)
    assert len(plans) == 3
    for i, plan in enumerate(plans):
        mine = [chunks[i], chunks[i + 3]]
        assert plan.fast == [f for fast, _ in mine for f in fast] and plan.slow == [f for _, s in mine for f in s]


def test_train_and_val_items_keep_their_shapes(band_set: Path) -> None:
    spec = TransformSpec(48, (1.0, 0.875, 0.75))
    for mode in ("train", "val"):
        ds = SlowFastClips(band_set / "all.lst", band_set, CLIP, spec, WIDTH, HEIGHT, mode, seed=1)
        slow, fast, _ = ds[0]
        assert slow.shape == (3, 2, 48, 48) and fast.shape == (3, 4, 48, 48) and fast.dtype == torch.uint8
        assert torch.equal(slow, fast[:, [1, 3]])  # the slow frames are every second fast one
        assert ds.plans(0) == [ds.plan(0)]


def test_train_flips_half_the_time(band_set: Path) -> None:
    ds = SlowFastClips(band_set / "all.lst", band_set, CLIP, TransformSpec(48), WIDTH, HEIGHT, "train")
    flips = 0
    for epoch in range(400):
        ds.set_epoch(epoch)
        flips += ds.plan(0).flip
    assert 150 < flips < 250
    still = SlowFastClips(band_set / "all.lst", band_set, CLIP, TransformSpec(48, random_flip=False), WIDTH, HEIGHT)
    assert not any(still.plan(0).flip for _ in range(20))


# -- bad settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"test_crops": 2}, r"data.test_crops must be 1 \(the centre\) or 3 .*got 2"),
        ({"test_crops": True}, "data.test_crops must be 1"),
        ({"test_clips": 0}, "data.test_clips must be an integer >= 1, got 0"),
        ({"scale_ratios": (1.0, 1.2)}, r"data.scale_ratios: 1.2 is not in \(0, 1\]; .*would crop past the frame"),
        ({"scale_ratios": ()}, "data.scale_ratios must be a non-empty list"),
        ({"max_distort": -1}, "data.max_distort must be an integer >= 0, got -1"),
        ({"fix_crop": "yes"}, "data.fix_crop must be true or false"),
        ({"more_fix_crop": 1}, "data.more_fix_crop must be true or false"),
        ({"std": (0.2, 0.0, 0.2)}, "data.std must be positive"),
        ({"mean": (0.5, 0.5)}, r"data.mean must be 3 numbers"),
        ({"input_size": 0}, "data.input_size must be an integer >= 1"),
    ],
)
def test_bad_transform_settings_are_named(fields: dict, message: str) -> None:
    with pytest.raises(ClipflowError, match=message):
        TransformSpec(**fields)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"test_crops": 2}, r"data.test_crops: 2 is not one of \[1, 3\]"),
        ({"test_clips": 0}, "data.test_clips: 0 is less than the minimum of 1"),
        ({"max_distort": -1}, "data.max_distort: -1 is less than the minimum of 0"),
        ({"fix_crop": "no"}, "data.fix_crop: 'no' is not of type 'boolean'"),
        ({"scale_ratios": [1.0, 1.5]}, "data.scale_ratios.1: 1.5 is greater than the maximum of 1"),
    ],
)
def test_bad_recipe_values_are_named(data: dict, message: str) -> None:
    from clipflow.recipe import load_recipe

    with pytest.raises(ClipflowError, match=message):
        load_recipe("slowfast_tiny_synthetic", {"data": data})


def test_recipe_defaults_fill_the_new_keys() -> None:
    from clipflow.recipe import load_recipe

    spec = TransformSpec.from_recipe(load_recipe("slowfast_tiny_synthetic"))
    assert (spec.fix_crop, spec.more_fix_crop, spec.max_distort, spec.test_clips, spec.test_crops) == (
        True,
        True,
        1,
        10,
        3,
    )
    assert spec.input_size == 64 and spec.scale_ratios == (1.0, 0.875) and spec.random_flip is False
    override = {"data": {"fix_crop": False, "max_distort": 0, "test_clips": 4, "test_crops": 1}}
    spec = TransformSpec.from_recipe(load_recipe("slowfast_tiny_synthetic", override))
    assert (spec.fix_crop, spec.max_distort, spec.test_views) == (False, 0, 4)


def test_crops_that_do_not_fit_the_frame_are_named(band_set: Path) -> None:
    big = TransformSpec(80)
    for mode in ("val", "test"):
        with pytest.raises(ClipflowError, match=r"data.input_size 80 does not fit in the decoded 112x64 frame"):
            SlowFastClips(band_set / "all.lst", band_set, CLIP, big, WIDTH, HEIGHT, mode)
    SlowFastClips(band_set / "all.lst", band_set, CLIP, big, WIDTH, HEIGHT, "train")  # training resizes: fine
    with pytest.raises(ClipflowError, match=r"data.scale_ratios: 0.01 of the short side of the decoded 112x64"):
        SlowFastClips(band_set / "all.lst", band_set, CLIP, TransformSpec(32, (1.0, 0.01)), WIDTH, HEIGHT, "train")


def test_test_mode_plan_asks_for_plans(band_set: Path) -> None:
    ds = SlowFastClips(band_set / "all.lst", band_set, CLIP, TransformSpec(64), WIDTH, HEIGHT, "test")
    with pytest.raises(ClipflowError, match=r"a test item has 30 views \(data.test_clips 10 x data.test_crops 3\)"):
        ds.plan(0)
