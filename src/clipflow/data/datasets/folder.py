"""A class-per-folder tree of videos (``data.source: folder``), as users and torchvision's ``ImageFolder`` keep them.

``root/<class>/<video>`` (videos may sit in subfolders of their class folder), the class names being the folder
names sorted by name (label i = the i-th). Either the tree holds the class folders and a seeded, stratified share
of each class (``val_fraction``) goes to validation, or it holds exactly two folders, ``train/`` and ``val/``, each
with class folders (the classes are those of ``train/``; every class of ``val/`` must be one of them).

A file is a video by its extension (:data:`VIDEO_EXTENSIONS`, any case); other files are left out and named in the
log, as are files beside the class folders. Names starting with "." (a viewer's thumbnails, a sync tool's state)
are not looked at, as in :mod:`clipflow.data.stamps`. A class folder without a video is refused, named.

The split: per class, the videos sorted by path are shuffled by a generator seeded with ``seed`` and the class name,
and the first ``round(n * val_fraction)`` go to validation, at least one while the class has two videos or more and
never all: the same seed gives the same split, on any machine, and adding a video to one class leaves the others'
split as it was.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from clipflow.data.datasets.lists import DatasetLists
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError

VIDEO_EXTENSIONS = frozenset(
    ".mp4 .m4v .mov .avi .mkv .webm .mpg .mpeg .wmv .flv .3gp .ogv .ts .mts .m2ts".split()
)  # fmt: skip
SPLIT_FOLDERS = ("train", "val")
SHOWN = 5  # files left out named one by one in a note; the rest counted


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_EXTENSIONS


def _visible(names: list[str]) -> list[str]:
    return sorted(n for n in names if not n.startswith("."))


def _class_folders(tree: Path, root: Path, others: list[str]) -> dict[str, list[str]]:
    """Class name -> its videos' paths relative to ``root``, sorted; files beside the class folders and files
    that are no video are added to ``others`` (relative to root)."""
    classes: dict[str, list[str]] = {}
    for name in _visible(os.listdir(tree)):
        folder = tree / name
        if not folder.is_dir():
            others.append(folder.relative_to(root).as_posix())
            continue
        videos = []
        for here, subfolders, files in os.walk(folder, followlinks=True):
            subfolders[:] = _visible(subfolders)
            for file in _visible(files):
                path = Path(here, file)
                (videos if is_video(path) else others).append(path.relative_to(root).as_posix())
        if not videos:
            raise ClipflowError(
                f"class folder {folder} holds no video (a video is a file ending in one of "
                f"{', '.join(sorted(VIDEO_EXTENSIONS))}); put its videos there, or remove the folder"
            )
        classes[name] = sorted(videos)
    return classes


def _held_out(videos: list[str], fraction: float, seed: int, name: str) -> set[str]:
    """The videos of one class that go to validation (see the module)."""
    n = len(videos)
    count = min(max(round(n * fraction), 1 if n >= 2 else 0), n - 1)
    shuffled = list(videos)
    random.Random(f"{seed}/{name}").shuffle(shuffled)
    return set(shuffled[:count])


def _entries(by_class: dict[str, list[str]], index: dict[str, int]) -> list[VideoEntry]:
    return [VideoEntry(path, index[name]) for name, videos in by_class.items() for path in videos]


def folder_lists(root: str | Path, val_fraction: float = 0.2, seed: int = 0) -> DatasetLists:
    """The lists of the class-per-folder tree at ``root`` (see the module)."""
    root = Path(root)
    if not root.is_dir():
        raise ClipflowError(f"data.root {root} is not a folder; give the folder that holds one folder per class")
    if not 0 < val_fraction < 1:
        raise ClipflowError(f"val_fraction must be more than 0 and less than 1, got {val_fraction}")
    folders = [n for n in _visible(os.listdir(root)) if (root / n).is_dir()]
    others: list[str] = []
    notes: list[str] = []
    if set(SPLIT_FOLDERS) <= set(folders):
        if len(folders) > len(SPLIT_FOLDERS):
            extra = ", ".join(n for n in folders if n not in SPLIT_FOLDERS)
            raise ClipflowError(
                f"data.root {root} holds train/ and val/ beside other folders ({extra}): give either the class "
                "folders alone (a share of each goes to validation) or train/ and val/ alone, each with the class "
                "folders"
            )
        others += [n for n in _visible(os.listdir(root)) if not (root / n).is_dir()]  # files beside train/, val/
        split = {s: _class_folders(root / s, root, others) for s in SPLIT_FOLDERS}
        strays = sorted(set(split["val"]) - set(split["train"]))
        if strays:
            raise ClipflowError(
                f"{root / 'val'}: class folder(s) {', '.join(strays)} have no counterpart in {root / 'train'}: the "
                "model cannot learn a class it never trains on; add its training videos or remove it from val/"
            )
        classes = list(split["train"])
        unseen = [n for n in classes if n not in split["val"]]
        if unseen:
            notes.append(f"no val videos for class(es) {', '.join(unseen)}: they are trained, not validated")
        sources = {s: f"{root / s}/<class>/" for s in SPLIT_FOLDERS}
        index = {name: i for i, name in enumerate(classes)}
        lists = {s: _entries(split[s], index) for s in SPLIT_FOLDERS}
        how = "from the folder names of train/"
    else:
        by_class = _class_folders(root, root, others)
        if not by_class:
            raise ClipflowError(f"data.root {root} holds no class folder; put each class's videos in a folder "
                                "named after the class")  # fmt: skip
        classes = list(by_class)
        index = {name: i for i, name in enumerate(classes)}
        held = {name: _held_out(videos, val_fraction, seed, name) for name, videos in by_class.items()}
        lists = {
            "train": _entries({n: [v for v in vs if v not in held[n]] for n, vs in by_class.items()}, index),
            "val": _entries({n: [v for v in vs if v in held[n]] for n, vs in by_class.items()}, index),
        }
        alone = [name for name, videos in by_class.items() if len(videos) == 1]
        if alone:
            notes.append(f"class(es) {', '.join(alone)} have one video: it trains, none validates")
        sources = {s: f"{root}/<class>/ ({'1 - ' if s == 'train' else ''}val_fraction {val_fraction}, seed {seed})"
                   for s in SPLIT_FOLDERS}  # fmt: skip
        how = "from the folder names"
    if others:
        shown = ", ".join(others[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        notes.append(f"left out {len(others)} file(s) that are no video by their extension or lie beside the class "
                     f"folders: {shown}")  # fmt: skip
    return DatasetLists(f"class folders of {root}", classes, how, root, lists, sources, notes)
