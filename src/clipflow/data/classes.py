"""The classes of a scanned data set, as its index records them (``manifest.json``: ``num_classes`` and the names
of its class index, ``classes``), for a recipe that takes them from the data (:func:`clipflow.recipe.fit_to_data`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clipflow.textfile import read_json_object

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DataClasses:
    count: int | None  # None: an index of an earlier clipflow, which did not record it
    names: list[str] | None  # None: the data has no class index
    source: str  # the manifest, for messages


def index_classes(list_path: str | Path) -> DataClasses | None:
    """The classes the index of ``list_path`` (a scanned list) records in the manifest beside it; None without one."""
    path = Path(list_path).parent / MANIFEST
    if not path.is_file():
        return None
    manifest = read_json_object(path, "data manifest", "the data scan's manifest.json")
    names = manifest.get("classes")
    count = manifest.get("num_classes")
    names = [str(n) for n in names] if isinstance(names, list) and names else None
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
    return DataClasses(count if count is not None else (len(names) if names else None), names, str(path))
