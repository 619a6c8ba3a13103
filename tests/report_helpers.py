"""Checks on PNG images shared by the report tests: decoded with Pillow, never by the code under test."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
from PIL import Image

TAB_BLUE = (31, 119, 180)  # matplotlib's first line colour


def embedded_figures(page: str) -> dict[str, Image.Image]:
    """The report's data-URI figures by file name, decoded."""
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="[^"]*" data-file="([^"]+)">', page)
    return {name: Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB") for data, name in found}


def ink(image: Image.Image) -> float:
    """Share of pixels that are not (near) white."""
    grey = np.asarray(image.convert("L"))
    return float((grey < 235).mean())


def colour_columns(image: Image.Image, colour: tuple[int, int, int], tolerance: int = 12) -> set[int]:
    """The x positions where a pixel of ``colour`` appears."""
    rgb = np.asarray(image.convert("RGB")).astype(np.int16)  # [height, width, 3]
    near = (np.abs(rgb - np.array(colour, dtype=np.int16)) <= tolerance).all(axis=2)
    return {int(x) for x in np.nonzero(near.any(axis=0))[0]}
