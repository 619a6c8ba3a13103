"""Miniatures of the published video data sets with small playable videos, for end-to-end tests: UCF101, HMDB51,
Something-Something v2 and Kinetics-600, each with 3 of its real classes and its annotation files in their
upstream form (UCF101's CRLF line ends, HMDB51's space after the tag, SSv2's JSON records, Kinetics' CSV header).

Each ``make_*`` writes ``per_class`` videos a class (20 frames of 64x48): with 3 or more, every split trains on at
least 2 videos of each class and validates on at least 1. UCF101 and HMDB51 videos are H.264 in .avi (the published
ones are MPEG-4 Part 2 in .avi: the container is what the readers see), Kinetics' H.264 in .mp4, and SSv2's VP9 in
.webm, as published (libx264 cannot go into WebM).
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
from kinetics_helpers import write_video

FRAMES, WIDTH, HEIGHT = 20, 64, 48  # decord2 3.4.0 cannot copy out 32x24 frames (its check fails); 64x48 it reads

UCF101_CLASSES = ["ApplyEyeMakeup", "HandstandPushups", "YoYo"]  # classInd.txt numbers them 1, 2, 3 here
UCF101_FILE_CLASS = {"HandstandPushups": "HandStandPushups"}  # the published file names' spelling (capital S)
UCF101_TEST_GROUPS = {1: range(1, 8), 2: range(8, 15), 3: range(15, 22)}  # split N tests on these groups

HMDB51_VIDEOS = {  # class -> a published video name of it, less its trailing _<n>.avi
    "brush_hair": "April_09_brush_hair_u_nm_np1_ba_goo",
    "cartwheel": "(Rad)Schlag_die_Bank!_cartwheel_f_cm_np1_le_med",
    "clap": "#20_Rhythm_clap_u_nm_np1_fr_goo",
}

SSV2_CLASSES = [  # labels.json numbers them 0, 1, 2 here
    "Approaching something with your camera",
    "Holding something next to something",
    "Putting something on a surface",
]
SSV2_TEMPLATES = {
    "Approaching something with your camera": ("Approaching [something] with your camera", ["a mug"]),
    "Holding something next to something": ("Holding [something] next to [something]", ["potato", "bottle"]),
    "Putting something on a surface": ("Putting [something] on a surface", ["a pen"]),
}

KINETICS_HEADER = "label,youtube_id,time_start,time_end,split\n"  # Kinetics-600's train.csv and validate.csv
KINETICS600_ROWS = {  # label -> published rows of kinetics-600_val.csv: (youtube_id, time_start, time_end)
    "abseiling": [("0wR5jVB-WPk", 417, 427), ("3caPS4FHFF8", 36, 46), ("3yaoNwz99xM", 62, 72)],
    "acting in play": [("08MqsEmN19s", 19, 29), ("3fNo1qOOIzQ", 0, 10), ("3farXV8FokA", 197, 207)],
    "adjusting glasses": [("-7O581Lzrb4", 154, 164), ("0kz8c1GGOkI", 162, 172), ("0zxkyPzmVwY", 94, 104)],
}


def write_webm(path: Path, frames: int = FRAMES, width: int = WIDTH, height: int = HEIGHT, fps: int = 12) -> None:
    """A small VP9 WebM made with PyAV (Something-Something v2's form): noise whose brightness rises frame by frame."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(path.name))
    with av.open(str(path), mode="w", format="webm") as out:
        stream = out.add_stream("libvpx-vp9", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "0"}
        for i in range(frames):
            picture = (rng.integers(0, 64, (height, width, 3)) + 8 * i).astype(np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        out.mux(stream.encode())


def _video(path: Path) -> None:
    write_video(path, frames=FRAMES, width=WIDTH, height=HEIGHT)


def ucf101_groups(per_class: int) -> list[int]:
    """The groups of a class's videos: one in each split's test groups first, so that each split tests one."""
    return [(1, 8, 15, 22)[i % 4] + i // 4 for i in range(per_class)]


def make_ucf101(base: Path, per_class: int = 3) -> dict[str, Path]:
    """``base/UCF-101/<Class>/v_<Class>_gGG_c01.avi`` and ``base/ucfTrainTestlist/`` (classInd.txt, trainlist0N.txt,
    testlist0N.txt for N = 1, 2, 3, with CRLF line ends)."""
    root, annotations = base / "UCF-101", base / "ucfTrainTestlist"
    annotations.mkdir(parents=True, exist_ok=True)
    (annotations / "classInd.txt").write_bytes(
        "".join(f"{i} {name}\r\n" for i, name in enumerate(UCF101_CLASSES, start=1)).encode()
    )
    videos = {name: [] for name in UCF101_CLASSES}
    for name in UCF101_CLASSES:
        for group in ucf101_groups(per_class):
            rel = f"{name}/v_{UCF101_FILE_CLASS.get(name, name)}_g{group:02d}_c01.avi"
            _video(root / rel)
            videos[name].append((group, rel))
    for split, tested in UCF101_TEST_GROUPS.items():
        train = [
            f"{rel} {i}\r\n" for i, name in enumerate(UCF101_CLASSES, 1) for g, rel in videos[name] if g not in tested
        ]
        test = [f"{rel}\r\n" for name in UCF101_CLASSES for g, rel in videos[name] if g in tested]
        (annotations / f"trainlist{split:02d}.txt").write_bytes("".join(train).encode())
        (annotations / f"testlist{split:02d}.txt").write_bytes("".join(test).encode())
    return {"root": root, "annotations": annotations}


def make_hmdb51(base: Path, per_class: int = 3) -> dict[str, Path]:
    """``base/hmdb51/<class>/<video>.avi`` and ``base/testTrainMulti_7030_splits/<class>_test_split<N>.txt`` for
    N = 1, 2, 3: in split N video N - 1 (modulo per_class) of each class tests (tag 2), the others train (tag 1)."""
    root, annotations = base / "hmdb51", base / "testTrainMulti_7030_splits"
    annotations.mkdir(parents=True, exist_ok=True)
    for name, stem in HMDB51_VIDEOS.items():
        files = [f"{stem}_{i}.avi" for i in range(per_class)]
        for file in files:
            _video(root / name / file)
        for split in (1, 2, 3):
            tested = (split - 1) % per_class
            lines = "".join(f"{file} {2 if i == tested else 1} \n" for i, file in enumerate(files))
            (annotations / f"{name}_test_split{split}.txt").write_text(lines, encoding="utf-8")
    return {"root": root, "annotations": annotations}


def ssv2_records(ids: list[int]) -> list[dict]:
    """train.json or validation.json records for ``ids``, the classes in turn."""
    records = []
    for n, video in enumerate(ids):
        template, objects = SSV2_TEMPLATES[SSV2_CLASSES[n % len(SSV2_CLASSES)]]
        label = template
        for thing in objects:
            label = label.replace("[something]", thing, 1)
        records.append({"id": str(video), "label": label.lower(), "template": template, "placeholders": objects})
    return records


def make_ssv2(base: Path, per_class: int = 3) -> dict[str, Path]:
    """``base/20bn-something-something-v2/<id>.webm`` and ``base/labels/`` (labels.json, train.json,
    validation.json and test.json, the last with ids alone): per class, one video validates, the others train."""
    root, annotations = base / "20bn-something-something-v2", base / "labels"
    annotations.mkdir(parents=True, exist_ok=True)
    labels = {name: str(i) for i, name in enumerate(SSV2_CLASSES)}
    (annotations / "labels.json").write_text(json.dumps(labels, indent=1), encoding="utf-8")
    count = len(SSV2_CLASSES)
    val_ids = [78687 + i for i in range(count)]
    train_ids = [100000 + i for i in range(count * (per_class - 1))]
    for name, ids in (("train.json", train_ids), ("validation.json", val_ids)):
        text = "[\n" + ",\n".join(json.dumps(r) for r in ssv2_records(ids)) + "\n]\n"
        (annotations / name).write_text(text, encoding="utf-8")
        for video in ids:
            write_webm(root / f"{video}.webm")
    (annotations / "test.json").write_text(json.dumps([{"id": "1420"}]), encoding="utf-8")
    return {"root": root, "annotations": annotations}


def make_kinetics600(base: Path, per_class: int = 3) -> dict[str, Path]:
    """``base/k600/train.csv`` and ``validate.csv`` with Kinetics-600's header, and ``base/k600/videos/<label>/
    <youtube_id>_<start:06d>_<end:06d>.mp4`` (label folders with spaces): per class, one row validates."""
    folder = base / "k600"
    root = folder / "videos"
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[str]] = {"train": [], "val": []}
    for label, published in KINETICS600_ROWS.items():
        for i in range(per_class):
            youtube_id, start, end = published[i % len(published)]
            if i >= len(published):
                youtube_id = f"{youtube_id[:8]}{i:03d}"
            split = "val" if i == 0 else "train"
            rows[split].append(f"{label},{youtube_id},{start},{end},{split}\n")
            _video(root / label / f"{youtube_id}_{start:06d}_{end:06d}.mp4")
    (folder / "train.csv").write_text(KINETICS_HEADER + "".join(rows["train"]), encoding="utf-8")
    (folder / "validate.csv").write_text(KINETICS_HEADER + "".join(rows["val"]), encoding="utf-8")
    return {"train_csv": folder / "train.csv", "val_csv": folder / "validate.csv", "root": root}
