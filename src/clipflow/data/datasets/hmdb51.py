"""HMDB51's published splits (the ``testTrainMulti_7030_splits/`` folder of test_train_splits.rar).

The folder holds ``<class>_test_split<N>.txt`` for each of the 51 classes and N = 1, 2, 3 (153 files). Each line
is one video of the class and its tag, with a space after the tag: ``<video>.avi <tag> ``. Tag 1: training, 2:
testing, 0: not used in this split (each split trains on 70 videos of a class and tests on 30). The class is the
file name less ``_test_split<N>.txt``; class names hold underscores (``brush_hair``, ``climb_stairs``).

The classes are sorted by name, as mmaction2 orders them (tools/data/hmdb51/label_map.txt; parse_file_list.py's
``parse_hmdb51_split`` numbers the sorted class folders): by the class name, not the file name, so ``climb`` comes
before ``climb_stairs`` though ``climb_stairs_test_split1.txt`` sorts before ``climb_test_split1.txt``.

Split N trains on the tag-1 videos and validates on the tag-2 ones, class after class in that order, each class's
in the order of its file; the tag-0 videos are counted in a note. Videos are ``<root>/<class>/<video>.avi``, the
root being the folder of the extracted class folders. Video names hold characters such as ``(``, ``!``, ``&`` and
``#`` (``(Rad)Schlag_die_Bank!_cartwheel_f_cm_np1_le_med_0.avi``); a listed path starts with its class folder, so
no line of the lists made starts with ``#``.
"""

from __future__ import annotations

from pathlib import Path

from clipflow.data.datasets.lists import DatasetLists
from clipflow.data.datasets.published import annotation_folder, check_root, check_split
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.textfile import read_text

FOLDER = "testTrainMulti_7030_splits"
SETTING = "data.hmdb51.annotations"
TAGS = {"1": "train", "2": "val"}  # tag 0: not in this split
LINE = "'<video>.avi <tag>' with the tag 0, 1 or 2 (e.g. 'April_09_brush_hair_u_nm_np1_ba_goo_0.avi 1')"


def split_files(folder: Path, split: int) -> dict[str, Path]:
    """Class name -> its ``<class>_test_split<split>.txt``, sorted by class name."""
    suffix = f"_test_split{split}.txt"
    found = {p.name[: -len(suffix)]: p for p in folder.glob(f"*{suffix}") if p.is_file() and p.name != suffix}
    if not found:
        below = sorted(folder.glob(f"*/*{suffix}"))
        hint = f" ({below[0].parent} holds them: give that folder)" if below else ""
        raise ClipflowError(f"no <class>{suffix} in {folder}: give {SETTING} the extracted {FOLDER} folder{hint}")
    return {name: found[name] for name in sorted(found)}


def _read_class(path: Path, name: str, label: int, lists: dict[str, list[VideoEntry]]) -> int:
    """Adds the tagged videos of one class file to ``lists``; the number of tag-0 videos."""
    unused = 0
    first: dict[str, int] = {}
    for number, raw in enumerate(read_text(path, "HMDB51 split file", encoding="utf-8-sig").splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        where = f"{path} line {number}"
        if len(fields) != 2:
            raise ClipflowError(f"{where}: expected {LINE}, got {len(fields)} fields: {raw.strip()!r}")
        video, tag = fields
        if "/" in video:
            raise ClipflowError(f"{where}: expected a file name, got the path {video!r}; expected {LINE}")
        if tag not in ("0", *TAGS):
            raise ClipflowError(f"{where}: tag {tag!r} is not 0 (not in this split), 1 (train) or 2 (test); "
                                f"expected {LINE}")  # fmt: skip
        if video in first:
            raise ClipflowError(f"{where}: {video} is already on line {first[video]}; each video once")
        first[video] = number
        if tag == "0":
            unused += 1
        else:
            lists[TAGS[tag]].append(VideoEntry(f"{name}/{video}", label, None, number))
    if not first:
        raise ClipflowError(f"{path} is empty; expected one video of class {name} a line, {LINE}: give {SETTING} "
                            f"the extracted {FOLDER} folder")  # fmt: skip
    return unused


def hmdb51_lists(root: str | Path, annotations: str | Path, split: int) -> DatasetLists:
    """HMDB51 split ``split`` (1, 2 or 3) of the videos at ``root`` and the split files in ``annotations`` (see the
    module): train from tag 1, val from tag 2, the classes sorted by name."""
    split = check_split(split, "HMDB51", "data.hmdb51.split")
    folder = annotation_folder(annotations, SETTING, FOLDER)
    root = check_root(root, "the folder of the extracted HMDB51 class folders (one folder of .avi videos per class)")
    files = split_files(folder, split)
    classes = list(files)
    lists: dict[str, list[VideoEntry]] = {"train": [], "val": []}
    unused = 0
    lacking: dict[str, list[str]] = {"train": [], "val": []}
    for label, (name, path) in enumerate(files.items()):
        counts = {s: len(entries) for s, entries in lists.items()}
        unused += _read_class(path, name, label, lists)
        for s in lists:
            if len(lists[s]) == counts[s]:
                lacking[s].append(name)
    pattern = f"{folder}/<class>_test_split{split}.txt"
    notes = [f"{unused} video(s) tagged 0 (not in split {split}) left out"] if unused else []
    notes += [f"class(es) with no {s} video (tag {'1' if s == 'train' else '2'}) in split {split}: {', '.join(names)}"
              for s, names in lacking.items() if names]  # fmt: skip
    return DatasetLists(f"HMDB51 split {split}", classes, f"from the file names {pattern}, sorted", root, lists,
                        {"train": f"{pattern} (tag 1)", "val": f"{pattern} (tag 2)"}, notes)  # fmt: skip
