"""The class names of a list: the index folder's ``classes.txt`` (line i names label i), else the
``classes`` of its ``manifest.json`` (written by `clipflow data scan --classes`), else the label numbers."""

from __future__ import annotations

import json
from pathlib import Path

from clipflow.data.kinetics import read_classes
from clipflow.errors import ClipflowError


def class_names(list_path: str | Path, classes: int) -> list[str]:
    """``classes`` names for the labels of ``list_path``; labels the file does not name keep their number."""
    folder = Path(list_path).parent
    names, source = [], None
    if (folder / "classes.txt").is_file():
        source = folder / "classes.txt"
        names = read_classes(source)
    elif (folder / "manifest.json").is_file():
        try:
            names = json.loads((folder / "manifest.json").read_text()).get("classes") or []
        except (ValueError, AttributeError):
            names = []  # the manifest is the scan's business; without names the numbers stand in
        source = folder / "manifest.json"
    if len(names) > classes:
        raise ClipflowError(
            f"{source} names {len(names)} classes but the model has {classes}; is it the index of this list?"
        )
    return [str(n) for n in names] + [str(i) for i in range(len(names), classes)]
