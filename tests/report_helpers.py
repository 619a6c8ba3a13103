"""Checks on PNG images shared by the report tests: decoded with Pillow, never by the code under test."""

from __future__ import annotations

import base64
import io
import re

from PIL import Image

TAB_BLUE = (31, 119, 180)  # matplotlib's first line colour


def embedded_figures(page: str) -> dict[str, Image.Image]:
    """The report's data-URI figures by file name, decoded."""
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="[^"]*" data-file="([^"]+)">', page)
    return {name: Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB") for data, name in found}


def ink(image: Image.Image) -> float:
    """Share of pixels that are not (near) white."""
    grey = image.convert("L").tobytes()  # one byte a pixel
    return sum(1 for v in grey if v < 235) / len(grey)


def colour_columns(image: Image.Image, colour: tuple[int, int, int], tolerance: int = 12) -> set[int]:
    """The x positions where a pixel of ``colour`` appears."""
    rgb = image.convert("RGB")
    raw, width = rgb.tobytes(), rgb.width  # three bytes a pixel, row by row
    columns = set()
    for i in range(0, len(raw), 3):
        if all(abs(raw[i + c] - colour[c]) <= tolerance for c in range(3)):
            columns.add((i // 3) % width)
    return columns
