"""Shared by the report tests (report/test_report, workflow/test_report): checks on PNG images, decoded with Pillow,
never by the code under test; and a page as headless Chromium draws it (screenshot; CHROMIUM is None where Debian's
chromium package is not installed)."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

TAB_BLUE = (31, 119, 180)  # matplotlib's first line colour
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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


def screenshot(page: Path, out: Path, height: int = 6000) -> Path:
    """``page`` as headless Chromium draws it, 1400 pixels wide."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={out}",
         f"--window-size=1400,{height}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    return out
