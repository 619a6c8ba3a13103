"""Something-Something v2's published labels (the ``labels/`` folder of the download) as lists.

The files, as published (PySlowFast's loader, slowfast/datasets/ssv2.py, and mmaction2's parse_file_list.py name
them ``something-something-v2-<name>.json``, which is looked for too):

* ``labels.json``: one object, class name -> its index as a string:
  ``{"Approaching something with your camera": "0", ...}`` (174 classes). The indices must be 0..N-1, each once.
* ``train.json``, ``validation.json``: a list of records, one a video, ``{"id": "78687", "label": "holding potato
  next to vicks vaporub bottle", "template": "Holding [something] next to [something]", "placeholders": [...]}``.
  The class is the template with its ``[`` and ``]`` taken out, looked up in labels.json, as PySlowFast does; the
  label, with the objects filled in, is not used.
* ``test.json`` holds ids alone (its labels are held back): not used.

Train is train.json and val validation.json, in their order; the videos are ``<root>/<id>.webm``. An error names
the file and the line: of a JSON syntax error, or of the record that is wrong, with its index in the list and its id.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from clipflow.data.datasets.lists import DatasetLists
from clipflow.data.datasets.published import annotation_folder, check_root
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.textfile import json_kind, read_text

SETTING = "data.ssv2.annotations"
FOLDER = "labels"  # the folder of the download that holds the files
PREFIX = "something-something-v2-"  # PySlowFast's and mmaction2's names for the same files
FILES = {"labels": "labels.json", "train": "train.json", "val": "validation.json"}
RECORD = '{"id": "78687", "template": "Holding [something] next to [something]", ...}'
_SPACE = re.compile(r"[ \t\n\r]*")


def _file(folder: Path, name: str) -> Path:
    """``folder/name``, else ``folder/something-something-v2-name``; a ClipflowError naming both when neither is."""
    for candidate in (folder / name, folder / f"{PREFIX}{name}"):
        if candidate.is_file():
            return candidate
    below = sorted(folder.glob(f"*/{name}"))
    hint = f" ({below[0].parent} holds it: give that folder)" if below else ""
    raise ClipflowError(f"{name} not in {folder} (nor {PREFIX}{name}): give {SETTING} the folder of labels.json, "
                        f"train.json and validation.json (the {FOLDER} folder of the download){hint}")  # fmt: skip


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _syntax(path: Path, exc: json.JSONDecodeError, expected: str) -> ClipflowError:
    return ClipflowError(f"{path} line {exc.lineno} is not JSON ({exc.msg}, column {exc.colno}); expected {expected}")


def read_labels(path: Path) -> list[str]:
    """The class names of labels.json, name i for index i."""
    expected = 'one object, class name -> index: {"Approaching something with your camera": "0", ...}'
    text = read_text(path, "Something-Something v2 labels", encoding="utf-8-sig", fix=f"expected {expected}")

    def line(name: str) -> str:
        """' line N' of ``name``'s key in the file, or '' when it cannot be found as written."""
        for written in (json.dumps(name, ensure_ascii=False), json.dumps(name)):
            key = re.search(re.escape(written) + r"\s*:", text)
            if key:
                return f" line {_line_of(text, key.start())}"
        return ""

    def pairs(items: list[tuple[str, object]]) -> dict:
        seen: dict[str, object] = {}
        for name, value in items:
            if name in seen:
                raise ClipflowError(f"{path}{line(name)}: class {name!r} is named twice; each class once")
            seen[name] = value
        return seen

    if not text.strip():
        raise ClipflowError(f"{path} is empty; expected {expected}")
    try:
        value = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise _syntax(path, exc, expected) from None
    if not isinstance(value, dict):
        raise ClipflowError(f"{path} holds {json_kind(value)}, not an object; expected {expected}")
    if not value:
        raise ClipflowError(f"{path} holds no class; expected {expected}")
    named: dict[int, str] = {}
    for name, index in value.items():
        where = f"{path}{line(name)}"
        if isinstance(index, str) and index.isascii() and index.isdigit():
            number = int(index)
        elif isinstance(index, int) and not isinstance(index, bool) and index >= 0:
            number = index
        else:
            raise ClipflowError(f"{where}: the index of class {name!r} is {json.dumps(index)}; expected a whole "
                                f"number 0 or more, written as a string (\"0\")")  # fmt: skip
        if number in named:
            raise ClipflowError(f"{where}: index {number} of class {name!r} is already class {named[number]!r}; "
                                "each index once")  # fmt: skip
        named[number] = name
    gaps = [i for i in range(len(named)) if i not in named]
    if gaps:
        top = max(named)
        raise ClipflowError(f"{path}{line(named[top])}: index {top} of class {named[top]!r}, but no class has index "
                            f"{gaps[0]}: the {len(named)} indices must run 0..{len(named) - 1}, each once")  # fmt: skip
    return [named[i] for i in range(len(named))]


def json_records(path: Path, text: str, expected: str) -> list[tuple[object, int]]:
    """The items of the JSON list ``text`` (the file ``path``), each with the line it starts on."""
    decoder = json.JSONDecoder()
    at = _SPACE.match(text).end()
    if at == len(text):
        raise ClipflowError(f"{path} is empty; expected a list of records {expected}")
    if text[at] != "[":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _syntax(path, exc, f"a list of records {expected}") from None
        kind = "an object" if isinstance(value, dict) else json_kind(value)
        raise ClipflowError(f"{path} holds {kind}, not a list; expected a list of records {expected}")
    records: list[tuple[object, int]] = []
    line, counted = 1, 0
    at = _SPACE.match(text, at + 1).end()
    try:
        if text.startswith("]", at):
            at += 1
        else:
            while True:
                line, counted = line + text.count("\n", counted, at), at
                value, at = decoder.raw_decode(text, at)
                records.append((value, line))
                at = _SPACE.match(text, at).end()
                if text.startswith(",", at):
                    at = _SPACE.match(text, at + 1).end()
                elif text.startswith("]", at):
                    at += 1
                    break
                else:
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _SPACE.match(text, at).end()
        if at != len(text):
            raise json.JSONDecodeError("Extra data", text, at)
    except json.JSONDecodeError as exc:
        raise _syntax(path, exc, f"a list of records {expected}") from None
    return records


def _shown(record: dict, key: str) -> str:
    """A record's field as written in JSON, for a message; "missing" when it has none."""
    return json.dumps(record[key]) if key in record else "missing"


def _id(record: dict, where: str) -> str:
    video = record.get("id")
    if isinstance(video, int) and not isinstance(video, bool):
        video = str(video)
    if not isinstance(video, str) or not video.strip():
        raise ClipflowError(f"{where}: \"id\" is {_shown(record, 'id')}; expected the video's id, a string like "
                            f"\"78687\" (its video is <root>/78687.webm): {RECORD}")  # fmt: skip
    if video != video.strip() or "/" in video or "\\" in video:
        raise ClipflowError(f'{where}: id {video!r} is no file name; expected a string like "78687": {RECORD}')
    return video


def _read_split(path: Path, index: dict[str, int], labels_path: Path) -> list[VideoEntry]:
    """The entries of train.json or validation.json, in their order."""
    text = read_text(path, "Something-Something v2 annotation file", encoding="utf-8-sig", fix=f"expected {RECORD}")
    entries: list[VideoEntry] = []
    first: dict[str, tuple[int, int]] = {}
    for position, (record, line) in enumerate(json_records(path, text, RECORD)):
        where = f"{path} line {line}: record [{position}]"
        if not isinstance(record, dict):
            raise ClipflowError(f"{where} is {json_kind(record)}, not an object; expected {RECORD}")
        video = _id(record, where)
        where += f" (id {video!r})"
        if video in first:
            earlier, earlier_line = first[video]
            raise ClipflowError(f"{where}: the id is already record [{earlier}] (line {earlier_line}); each video "
                                "once in a split")  # fmt: skip
        first[video] = (position, line)
        template = record.get("template")
        if not isinstance(template, str):
            raise ClipflowError(f"{where}: \"template\" is {_shown(record, 'template')}; expected a string like "
                                f"\"Holding [something] next to [something]\": {RECORD}")  # fmt: skip
        name = template.replace("[", "").replace("]", "")
        if name not in index:
            raise ClipflowError(f"{where}: template {template!r} (as a class: {name!r}) is not in {labels_path} "
                                f"({len(index)} classes); the label and annotation files must come from one "
                                "download")  # fmt: skip
        entries.append(VideoEntry(f"{video}.webm", index[name], None, line))
    if not entries:
        raise ClipflowError(f"{path} holds no record; expected a list of records {RECORD}")
    return entries


def ssv2_lists(root: str | Path, annotations: str | Path) -> DatasetLists:
    """Something-Something v2's lists of the videos at ``root`` (``<id>.webm``) and the files in ``annotations``
    (see the module): train from train.json, val from validation.json, the classes from labels.json."""
    folder = annotation_folder(annotations, SETTING, f"{FOLDER} (labels.json, train.json, validation.json)")
    root = check_root(root, "the folder of the Something-Something v2 videos (<id>.webm)")
    paths = {key: _file(folder, name) for key, name in FILES.items()}
    classes = read_labels(paths["labels"])
    index = {name: i for i, name in enumerate(classes)}
    lists = {s: _read_split(paths[s], index, paths["labels"]) for s in ("train", "val")}
    return DatasetLists("Something-Something v2", classes, f"from {paths['labels']}", root, lists,
                        {s: str(paths[s]) for s in ("train", "val")})  # fmt: skip
