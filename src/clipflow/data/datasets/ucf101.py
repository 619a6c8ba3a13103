"""UCF101's published split files (the ``ucfTrainTestlist/`` folder of UCF101TrainTestSplits-RecognitionTask.zip).

The files, as published (with CRLF line ends; either kind is read):

* ``classInd.txt``: ``1 ApplyEyeMakeup`` to ``101 YoYo``, the class index from 1, a space, the class name, which is
  also its folder's name under the video root. Label i here is index i + 1 there.
* ``trainlist0N.txt`` (N = 1, 2, 3): ``ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1``, the video's path under the
  root and its class index from 1 (it must be its folder's class).
* ``testlist0N.txt``: ``ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi``, the path alone: the class is the folder part,
  looked up in classInd.txt, as mmaction2 does (tools/data/parse_file_list.py, ``parse_ucf101_splits``).

Split N trains on trainlist0N and validates on testlist0N, in their order. Videos are
``<root>/<Class>/v_<Class>_gGG_cCC.avi``, the root being the extracted ``UCF-101`` folder.

Case: class HandstandPushups' folder holds ``v_HandStandPushups_gGG_cCC.avi`` (capital S), and the lists write it so:
the path as listed is the one on disk. Some guides rewrite the lists (``sed s/v_HandStandPushups/v_HandstandPushups/``)
or rename the files, so a listed video that is not on disk as written is looked for in its folder ignoring case, and
the name found there is the one listed; a folder part that is a class of classInd.txt only ignoring case is that
class. Both are counted in a note.
"""

from __future__ import annotations

import os
from pathlib import Path

from clipflow.data.datasets.lists import DatasetLists
from clipflow.data.datasets.published import annotation_file, annotation_folder, check_root, check_split
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.textfile import read_text

FOLDER = "ucfTrainTestlist"
SETTING = "data.ucf101.annotations"
CLASS_INDEX = "classInd.txt"
TRAIN_LINE = "'Class/v_Class_gGG_cCC.avi label' (e.g. 'ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1')"
TEST_LINE = "'Class/v_Class_gGG_cCC.avi' (e.g. 'ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi')"


def read_class_index(path: Path) -> list[str]:
    """The class names of classInd.txt, label i for index i + 1; indices must run 1, 2, 3, ... in order."""
    names: list[str] = []
    lines_of: dict[str, int] = {}
    for number, raw in enumerate(read_text(path, "UCF101 class index", encoding="utf-8-sig").splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        where = f"{path} line {number}"
        if len(fields) != 2 or not (fields[0].isascii() and fields[0].isdigit()):
            raise ClipflowError(f"{where}: expected 'index ClassName' (e.g. '1 ApplyEyeMakeup'), got {raw.strip()!r}")
        index, name = int(fields[0]), fields[1]
        if 1 <= index <= len(names):
            raise ClipflowError(f"{where}: class index {index} is already on line {lines_of[names[index - 1]]} "
                                f"({names[index - 1]}); each index once")  # fmt: skip
        if index != len(names) + 1:
            raise ClipflowError(f"{where}: class index {index} where {len(names) + 1} was expected: {CLASS_INDEX} "
                                "numbers its classes 1, 2, 3, ... in order, one a line")  # fmt: skip
        if name in lines_of:
            raise ClipflowError(f"{where}: class {name} is already on line {lines_of[name]}; each class once")
        lines_of[name] = number
        names.append(name)
    if not names:
        raise ClipflowError(f"{path} is empty; expected one class a line, '1 ApplyEyeMakeup' to '101 YoYo': give "
                            f"{SETTING} the extracted {FOLDER} folder")  # fmt: skip
    return names


class _Disk:
    """Finds a listed video on disk, as written or ignoring case (see the module); counts the second kind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, dict[str, list[str]]] = {}  # folder -> lower-case name -> names on disk
        self.by_case: list[str] = []  # paths found only ignoring case, as listed

    def _names(self, folder: str) -> dict[str, list[str]]:
        if folder not in self.folders:
            try:
                names = os.listdir(self.root / folder) if folder != "." else os.listdir(self.root)
            except OSError:
                names = []
            by_lower: dict[str, list[str]] = {}
            for name in names:
                by_lower.setdefault(name.lower(), []).append(name)
            self.folders[folder] = by_lower
        return self.folders[folder]

    def find(self, rel: str) -> str:
        """``rel`` (``Class/file``) as it is on disk; ``rel`` itself when it is there or is nowhere."""
        if (self.root / rel).is_file():
            return rel
        folder, _, file = rel.partition("/")
        folders = self._names(".").get(folder.lower(), [])
        found = [f"{f}/{n}" for f in folders for n in self._names(f).get(file.lower(), [])]
        if len(found) == 1 and (self.root / found[0]).is_file():
            self.by_case.append(rel)
            return found[0]
        return rel


def _label(text: str, where: str, classes: list[str], index_path: Path) -> int:
    """A listed class index (from 1) as a label (from 0)."""
    if not (text.isascii() and text.isdigit()):
        raise ClipflowError(f"{where}: label {text!r} is not an integer; expected {TRAIN_LINE}")
    index = int(text)
    if not 1 <= index <= len(classes):
        raise ClipflowError(f"{where}: label {index} is out of range: {index_path} numbers its {len(classes)} "
                            f"classes 1..{len(classes)}; the lists and {CLASS_INDEX} must come from one "
                            f"{FOLDER}")  # fmt: skip
    return index - 1


def _read_list(path: Path, labelled: bool, classes: list[str], index_path: Path, disk: _Disk,
               folder_case: list[str]) -> list[VideoEntry]:  # fmt: skip
    """The entries of a trainlist (``labelled``) or testlist, in file order."""
    label_of = {name: i for i, name in enumerate(classes)}
    by_lower = {name.lower(): i for i, name in enumerate(classes)}
    shape = TRAIN_LINE if labelled else TEST_LINE
    entries: list[VideoEntry] = []
    first: dict[str, int] = {}
    for number, raw in enumerate(read_text(path, "UCF101 split list", encoding="utf-8-sig").splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        where = f"{path} line {number}"
        if len(fields) not in ((2,) if labelled else (1, 2)):
            raise ClipflowError(f"{where}: expected {shape}, got {len(fields)} fields: {raw.strip()!r}")
        rel = fields[0]
        folder, slash, file = rel.partition("/")
        if not (slash and folder and file) or "/" in file:
            raise ClipflowError(f"{where}: expected a path 'Class/video.avi' (its class folder, a slash, the "
                                f"file), got {rel!r}")  # fmt: skip
        label = label_of.get(folder)
        if label is None:
            label = by_lower.get(folder.lower())
            if label is None:
                raise ClipflowError(f"{where}: class folder {folder!r} is not a class of {index_path} "
                                    f"({len(classes)} classes); the lists and {CLASS_INDEX} must come from one "
                                    f"{FOLDER}")  # fmt: skip
            folder_case.append(rel)
        if len(fields) == 2:
            listed = _label(fields[1], where, classes, index_path)
            if listed != label:
                raise ClipflowError(f"{where}: label {listed + 1} is {classes[listed]} in {index_path}, but the "
                                    f"video's folder is {folder}, class {label + 1} there; the lists and "
                                    f"{CLASS_INDEX} must come from one {FOLDER}")  # fmt: skip
        if rel in first:
            raise ClipflowError(f"{where}: {rel} is already on line {first[rel]}; each video once in a list")
        first[rel] = number
        entries.append(VideoEntry(disk.find(rel), label, None, number))
    if not entries:
        raise ClipflowError(f"{path} is empty; expected one video a line, {shape}: give {SETTING} the extracted "
                            f"{FOLDER} folder")  # fmt: skip
    return entries


def ucf101_lists(root: str | Path, annotations: str | Path, split: int) -> DatasetLists:
    """UCF101 split ``split`` (1, 2 or 3) of the videos at ``root`` and the split files in ``annotations`` (see the
    module): train from trainlist0N.txt, val from testlist0N.txt, the classes from classInd.txt."""
    split = check_split(split, "UCF101", "data.ucf101.split")
    folder = annotation_folder(annotations, SETTING, FOLDER)
    root = check_root(root, "the extracted UCF-101 folder (one folder of .avi videos per class)")
    index_path = annotation_file(folder, CLASS_INDEX, SETTING, FOLDER)
    files = {s: annotation_file(folder, f"{kind}list{split:02d}.txt", SETTING, FOLDER)
             for s, kind in (("train", "train"), ("val", "test"))}  # fmt: skip
    classes = read_class_index(index_path)
    disk = _Disk(root)
    folder_case: list[str] = []
    lists = {s: _read_list(path, s == "train", classes, index_path, disk, folder_case) for s, path in files.items()}
    notes = []
    if disk.by_case:
        notes.append(f"{len(disk.by_case)} listed video(s) are on disk under another case (e.g. {disk.by_case[0]}): "
                     "listed as they are on disk")  # fmt: skip
    if folder_case:
        notes.append(f"{len(folder_case)} listed video(s) name their class folder in another case than "
                     f"{CLASS_INDEX} (e.g. {folder_case[0]}): given that class")  # fmt: skip
    return DatasetLists(f"UCF101 split {split}", classes, f"from {index_path}", root, lists,
                        {s: str(path) for s, path in files.items()}, notes)  # fmt: skip
