"""Spatial transforms of decoded clips: GluonCV's rules, as settings and crop boxes.

Where a crop lies is decided by the caller (the dataset's plan, from its own numpy
generator, so a clip is reproducible in any process); the functions here only compute
the candidate boxes and apply one. A box is (top, left, height, width) in the decoded frame.

Training: GluonCV's ``VideoMultiScaleCrop`` (gluoncv/data/transforms/video.py). Crop
sides are ``int(short_side * r)`` for each scale ratio ``r`` (no snapping to the input
size, unlike TSN's GroupMultiScaleCrop), as (height, width) pairs whose ratio indices
differ by at most ``max_distort``; one pair is drawn uniformly. With ``fix_crop`` the
offset is one of 5 positions (4 corners, centre) on a grid of quarter steps
``(H - crop_h) // 4`` and ``(W - crop_w) // 4``, 13 with ``more_fix_crop`` (plus the 4
edge centres and 4 quarter points), drawn uniformly; without it, top and left are
uniform over every position that fits. The crop is resized to ``input_size`` square,
then flipped with probability 0.5 if ``random_flip``.

Validation: GluonCV's ``VideoCenterCrop``, an ``input_size`` square at
``int(round((side - input_size) / 2))`` (Python's round: halves go to the even
integer; torchvision's center_crop uses the same rule), no resize.

Test views: ``test_crops`` squares of ``input_size``, no resize: 1 is the centre crop
above; 3 are PySlowFast's ``uniform_crop`` spatial_idx 0, 1, 2: the start, centre and
end of the long side (left, centre, right for a landscape or square frame; top,
centre, bottom for a portrait one), centred on the short side. The centre uses the
rounding above (PySlowFast rounds up: they differ by a pixel when the slack is odd),
so a 1-clip, 1-crop test is exactly the validation clip.

The pixel work on a clip is clipflow.data.pixels'; this module is torch-free, so a recipe is checked without
loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from clipflow.errors import ClipflowError
from clipflow.values import is_int, is_number

Box = tuple[int, int, int, int]  # top, left, height, width
TEST_CROPS = (1, 3)


def check_mean_std(mean: tuple, std: tuple) -> None:
    """A recipe's normalisation: 3 numbers each (R, G, B), the std positive."""
    for name, value in (("mean", mean), ("std", std)):
        if not isinstance(value, tuple) or len(value) != 3 or not all(is_number(v) for v in value):
            raise ClipflowError(f"data.{name} must be 3 numbers (R, G, B), got {value!r}")
    if not all(s > 0 for s in std):
        raise ClipflowError(f"data.std must be positive, got {std!r}")


@dataclass(frozen=True)
class TransformSpec:
    """The recipe's spatial settings (its ``data`` keys of the same names), test views included."""

    input_size: int = 224
    scale_ratios: tuple[float, ...] = (1.0, 0.875, 0.75, 0.66)
    max_distort: int = 1
    random_flip: bool = True
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    fix_crop: bool = True
    more_fix_crop: bool = True
    test_clips: int = 10
    test_crops: int = 3

    @classmethod
    def from_recipe(cls, recipe: dict) -> TransformSpec:
        """The recipe's ``data`` keys of these names; the defaults above where the recipe has none."""
        d = recipe["data"]
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def __post_init__(self) -> None:
        for name in ("scale_ratios", "mean", "std"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
        if not is_int(self.input_size) or self.input_size < 1:
            raise ClipflowError(f"data.input_size must be an integer >= 1, got {self.input_size!r}")
        if not isinstance(self.scale_ratios, tuple) or not self.scale_ratios:
            raise ClipflowError(f"data.scale_ratios must be a non-empty list of numbers, got {self.scale_ratios!r}")
        for ratio in self.scale_ratios:
            if not is_number(ratio) or not 0 < ratio <= 1:
                raise ClipflowError(
                    f"data.scale_ratios: {ratio!r} is not in (0, 1]; a crop side is that fraction of the frame's "
                    "short side, and a larger one would crop past the frame"
                )
        if not is_int(self.max_distort) or self.max_distort < 0:
            raise ClipflowError(f"data.max_distort must be an integer >= 0, got {self.max_distort!r}")
        for name in ("random_flip", "fix_crop", "more_fix_crop"):
            if not isinstance(getattr(self, name), bool):
                raise ClipflowError(f"data.{name} must be true or false, got {getattr(self, name)!r}")
        check_mean_std(self.mean, self.std)
        if not is_int(self.test_clips) or self.test_clips < 1:
            raise ClipflowError(f"data.test_clips must be an integer >= 1, got {self.test_clips!r}")
        if not is_int(self.test_crops) or self.test_crops not in TEST_CROPS:
            raise ClipflowError(
                "data.test_crops must be 1 (the centre) or 3 (start, centre and end of the long side), "
                f"got {self.test_crops!r}"
            )

    @property
    def test_views(self) -> int:
        return self.test_clips * self.test_crops

    def check_frame(self, height: int, width: int, mode: str) -> None:
        """Fails, naming the keys, when this mode's crops cannot be cut from a decoded (height, width) frame."""
        frame = f"the decoded {width}x{height} frame (data.new_width x data.new_height)"
        if mode == "train":
            base = min(height, width)
            smallest = min(self.scale_ratios)
            if int(base * smallest) < 1:
                raise ClipflowError(f"data.scale_ratios: {smallest} of the short side of {frame} is no pixel")
        elif self.input_size > min(height, width):
            raise ClipflowError(
                f"data.input_size {self.input_size} does not fit in {frame}: {mode} crops input_size squares "
                "without resizing; lower input_size or decode larger frames"
            )


# -- where crops lie -------------------------------------------------------------------------------


def crop_size_pairs(height: int, width: int, spec: TransformSpec) -> list[tuple[int, int]]:
    """(crop_h, crop_w) candidates, GluonCV's fillCropSize: ratios of the short side, at most max_distort apart."""
    base = min(height, width)
    sizes = [int(base * r) for r in spec.scale_ratios]
    return [(h, w) for i, h in enumerate(sizes) for j, w in enumerate(sizes) if abs(i - j) <= spec.max_distort]


def fix_crop_offsets(height: int, width: int, crop_h: int, crop_w: int, more_fix_crop: bool) -> list[tuple[int, int]]:
    """(top, left) candidates, GluonCV's fillFixOffset: corners and centre, and with more_fix_crop 8 more."""
    h, w = (height - crop_h) // 4, (width - crop_w) // 4
    offsets = [(0, 0), (0, 4 * w), (4 * h, 0), (4 * h, 4 * w), (2 * h, 2 * w)]
    if more_fix_crop:
        offsets += [(0, 2 * w), (4 * h, 2 * w), (2 * h, 0), (2 * h, 4 * w)]  # edge centres
        offsets += [(h, w), (h, 3 * w), (3 * h, w), (3 * h, 3 * w)]  # quarter points
    return offsets


def train_crop_box(height: int, width: int, spec: TransformSpec, rng: np.random.Generator) -> Box:
    """A multi-scale crop drawn from ``rng``: first its size, then its position."""
    pairs = crop_size_pairs(height, width, spec)
    crop_h, crop_w = pairs[int(rng.integers(len(pairs)))]
    if spec.fix_crop:
        offsets = fix_crop_offsets(height, width, crop_h, crop_w, spec.more_fix_crop)
        top, left = offsets[int(rng.integers(len(offsets)))]
    else:
        top = int(rng.integers(height - crop_h + 1))
        left = int(rng.integers(width - crop_w + 1))
    return top, left, crop_h, crop_w


def _centre(side: int, size: int) -> int:
    return int(round((side - size) / 2.0))


def center_crop_box(height: int, width: int, size: int) -> Box:
    """GluonCV's VideoCenterCrop (and torchvision's center_crop) position: round half to even."""
    return _centre(height, size), _centre(width, size), size, size


def test_crop_boxes(height: int, width: int, spec: TransformSpec) -> list[Box]:
    """The test crops, no resize: the centre, or the start, centre and end of the long side (PySlowFast order)."""
    size = spec.input_size
    centre = center_crop_box(height, width, size)
    if spec.test_crops == 1:
        return [centre]
    top, left = centre[:2]
    if height > width:  # portrait: top, centre, bottom
        return [(t, left, size, size) for t in (0, top, height - size)]
    return [(top, x, size, size) for x in (0, left, width - size)]
