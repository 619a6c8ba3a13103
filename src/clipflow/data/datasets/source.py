"""The data set a workflow config names (``data.source`` and its settings): what it needs set, the folder its lists
and index go to, its name in words, and how ``clipflow data lists`` is told to make its lists.

Each data set gets a folder of its own under ``results/data/`` unless ``data.dir`` names one: ``<source>`` while
every setting that chooses the data is at its default (the embedded synthetic set: ``results/data/synthetic``), else
``<source>-<the root's name>-<8 hex digits>``, the digits a digest of those settings. Another data set, or the same
one split otherwise, so never writes into another's index or the default's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex

from clipflow.errors import ClipflowError

LIST_SOURCES = ("folder", "ucf101", "hmdb51", "ssv2")  # made into lists by `clipflow data lists`
VIDEO_SOURCES = ("synthetic", "list", "kinetics", *LIST_SOURCES)
PUBLISHED = {"ucf101": "UCF101", "hmdb51": "HMDB51", "ssv2": "Something-Something v2"}
# the settings (data.<key>, or data.<section>.<key>) that choose each source's data; each must be set, but for
# those with a default (a split, a fraction, a seed)
CHOSEN_BY = {
    "synthetic": ("synthetic",),
    "folder": ("root", "folder"),
    "list": ("root", "train_list", "val_list", "classes"),
    "kinetics": ("kinetics",),
    "ucf101": ("root", "ucf101"),
    "hmdb51": ("root", "hmdb51"),
    "ssv2": ("root", "ssv2"),
    "cifar10": ("cifar10_dir",),
    "synthetic_cifar10": ("synthetic",),
}
NEEDED = {
    "folder": ("root",),
    "list": ("train_list", "val_list"),
    "kinetics": ("kinetics.train_csv", "kinetics.val_csv", "kinetics.root"),
    "ucf101": ("root", "ucf101.annotations"),
    "hmdb51": ("root", "hmdb51.annotations"),
    "ssv2": ("root", "ssv2.annotations"),
    "cifar10": ("cifar10_dir",),
}
WHAT = {
    "folder": "the folder holding one folder of videos per class",
    "list": "the two list files (and data.root, the folder their paths are relative to)",
    "kinetics": "the annotation CSVs (label,youtube_id,time_start,time_end,split) and the folder holding the videos",
    "ucf101": "the UCF-101 video folder and the extracted ucfTrainTestlist folder",
    "hmdb51": "the HMDB51 video folder and the extracted testTrainMulti_7030_splits folder",
    "ssv2": "the folder of the .webm videos and the folder of labels.json, train.json and validation.json",
    "cifar10": "the extracted cifar-10-batches-py folder",
}


def _value(data: dict, key: str):
    section, _, name = key.partition(".")
    return data[section][name] if name else data[section]


def check_source(data: dict) -> None:
    """The settings ``data.source`` needs are set; ClipflowError naming those that are not and what to give."""
    source = data["source"]
    unset = [f"data.{key}" for key in NEEDED.get(source, ()) if not _value(data, key)]
    if unset:
        raise ClipflowError(
            f"data.source is {source!r} but {', '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set; "
            f"give {WHAT[source]}"
        )


def _defaults() -> dict:
    from clipflow.schemas import config_defaults

    return config_defaults("data")


def dataset_dir(data: dict) -> str:
    """``data.dir``, else the data set's own folder under results/data/ (see the module)."""
    if data["dir"]:
        return data["dir"]
    source, defaults = data["source"], _defaults()
    chosen = {key: data[key] for key in CHOSEN_BY[source]}
    if chosen == {key: defaults[key] for key in chosen}:
        return f"results/data/{source}"
    absolute = {key: os.path.abspath(v) if key in ("root", "train_list", "val_list", "classes", "cifar10_dir") and v
                else v for key, v in chosen.items()}  # fmt: skip
    digest = hashlib.sha256(json.dumps(absolute, sort_keys=True).encode()).hexdigest()[:8]
    named = data["root"] if "root" in chosen else data["kinetics"]["root"] if source == "kinetics" else ""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(os.path.normpath(named)) if named else "").strip("._")
    return f"results/data/{source}-{name + '-' if name else ''}{digest}"


def dataset_name(data: dict) -> str:
    """The data set in words, as the report names it."""
    source = data["source"]
    if source in ("ucf101", "hmdb51"):
        return f"{PUBLISHED[source]} split {data[source]['split']} ({data['root']})"
    if source == "ssv2":
        return f"{PUBLISHED[source]} ({data['root']})"
    if source == "folder":
        return f"the class folders of {data['root']}"
    if source == "list":
        return f"the lists {data['train_list']} and {data['val_list']} ({data['root']})"
    if source == "kinetics":
        return f"Kinetics, the annotations {data['kinetics']['train_csv']} and {data['kinetics']['val_csv']}"
    if source == "cifar10":
        return f"CIFAR-10 ({data['cifar10_dir']})"
    return "clipflow's synthetic set" if source == "synthetic" else "clipflow's synthetic CIFAR-10 set"


def lists_flags(data: dict) -> str:
    """``clipflow data lists`` flags for a source of :data:`LIST_SOURCES` (without --out-dir), quoted for a shell."""
    source = data["source"]
    flags = ["--source", source, "--root", data["root"]]
    if source == "folder":
        flags += ["--val-fraction", str(data["folder"]["val_fraction"]), "--seed", str(data["folder"]["seed"])]
    else:
        flags += ["--annotations", data[source]["annotations"]]
        if "split" in data[source]:
            flags += ["--split", str(data[source]["split"])]
    return " ".join(shlex.quote(flag) for flag in flags)


def annotations_of(data: dict) -> str:
    """The folder of a published data set's split files (ucf101, hmdb51, ssv2); "" for the others."""
    source = data["source"]
    return data[source]["annotations"] if source in PUBLISHED else ""
