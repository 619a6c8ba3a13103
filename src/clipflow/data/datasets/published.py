"""What the published data sets' readers share (UCF101, HMDB51, Something-Something v2): the split chosen by number,
the video root, and the folder of split files as extracted from its archive, each checked with a message that names
the setting and what to give it."""

from __future__ import annotations

from pathlib import Path

from clipflow.errors import ClipflowError

SPLITS = (1, 2, 3)


def check_split(split: int, dataset: str, setting: str) -> int:
    """``split`` as one of the published splits 1, 2 and 3; else a ClipflowError naming ``setting``."""
    if isinstance(split, bool) or not isinstance(split, int) or split not in SPLITS:
        raise ClipflowError(f"{dataset} has splits 1, 2 and 3, not {split!r}; set {setting} to 1, 2 or 3")
    return split


def check_root(root: str | Path, what: str) -> Path:
    """The video root as a folder; else a ClipflowError saying what it should be (``what``)."""
    if not str(root):
        raise ClipflowError(f"data.root is not set; give {what}")
    if not Path(root).is_dir():
        raise ClipflowError(f"data.root {root} is not a folder; give {what}")
    return Path(root)


def annotation_folder(annotations: str | Path, setting: str, folder: str) -> Path:
    """The folder of the published split files; a ClipflowError when it is not set or not a folder."""
    if not str(annotations):
        raise ClipflowError(f"{setting} is not set; give it the extracted {folder} folder")
    path = Path(annotations)
    if not path.is_dir():
        raise ClipflowError(f"{setting} {path} is not a folder; give it the extracted {folder} folder")
    return path


def _hint(folder: Path, name: str) -> str:
    """Where below ``folder`` a file ``name`` is (the archive extracted one level too high), for a message."""
    found = sorted(folder.glob(f"*/{name}"))
    return f" ({found[0].parent} holds it: give that folder)" if found else ""


def annotation_file(folder: Path, name: str, setting: str, extracted: str) -> Path:
    """``folder/name``; a ClipflowError naming the file expected and the setting when it is not there."""
    path = folder / name
    if not path.is_file():
        raise ClipflowError(f"{name} not in {folder}: give {setting} the extracted {extracted} folder"
                            + _hint(folder, name))  # fmt: skip
    return path
