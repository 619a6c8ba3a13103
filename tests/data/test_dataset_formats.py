"""The published annotation files of UCF101, HMDB51, Something-Something v2 and Kinetics-600/700 read into lists:
miniatures in each upstream form (CRLF, trailing spaces, JSON layouts, CSV headers) with the real class names and
empty placeholder videos, the exact lists made of them, and every broken input named by file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dataset_helpers import make_hmdb51, make_kinetics600, make_ssv2, make_ucf101

from clipflow.data.datasets.hmdb51 import hmdb51_lists
from clipflow.data.datasets.lists import write_dataset
from clipflow.data.datasets.ssv2 import ssv2_lists
from clipflow.data.datasets.ucf101 import ucf101_lists
from clipflow.data.kinetics import kinetics_lists, read_annotations
from clipflow.data.listfile import VideoEntry, read_list
from clipflow.errors import ClipflowError


def touch(root: Path, paths: list[str]) -> None:
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()


def crlf(lines: list[str]) -> bytes:
    return "".join(f"{line}\r\n" for line in lines).encode()


def raises(match: str):
    return pytest.raises(ClipflowError, match=re.escape(match))


# UCF101: ucfTrainTestlist/ as published, CRLF; split 1 tests on groups g01-g07, split 2 on g08-g14.
UCF_CLASSES = ["ApplyEyeMakeup", "HandstandPushups", "PlayingDaf", "YoYo"]
UCF_VIDEOS = {  # class -> its videos' file names; HandstandPushups' files are spelt HandStand, as published
    "ApplyEyeMakeup": ["v_ApplyEyeMakeup_g01_c01.avi", "v_ApplyEyeMakeup_g08_c01.avi", "v_ApplyEyeMakeup_g25_c02.avi"],
    "HandstandPushups": [
        "v_HandStandPushups_g01_c01.avi",
        "v_HandStandPushups_g09_c03.avi",
        "v_HandStandPushups_g15_c04.avi",
    ],
    "PlayingDaf": ["v_PlayingDaf_g07_c05.avi", "v_PlayingDaf_g10_c01.avi"],
    "YoYo": ["v_YoYo_g02_c01.avi", "v_YoYo_g14_c02.avi", "v_YoYo_g20_c03.avi"],
}
UCF_TEST_GROUPS = {1: range(1, 8), 2: range(8, 15)}


def ucf_lists(split: int) -> tuple[list[str], list[str]]:
    """trainlist0N and testlist0N lines (without line ends), as published."""
    train, test = [], []
    for label, name in enumerate(UCF_CLASSES, start=1):
        for file in UCF_VIDEOS[name]:
            group = int(file.rsplit("_g", 1)[1][:2])
            if group in UCF_TEST_GROUPS[split]:
                test.append(f"{name}/{file}")
            else:
                train.append(f"{name}/{file} {label}")
    return train, test


@pytest.fixture
def ucf(tmp_path: Path) -> dict[str, Path]:
    root, ann = tmp_path / "UCF-101", tmp_path / "ucfTrainTestlist"
    ann.mkdir()
    (ann / "classInd.txt").write_bytes(crlf([f"{i} {n}" for i, n in enumerate(UCF_CLASSES, start=1)]))
    for split in (1, 2, 3):
        train, test = ucf_lists(min(split, 2))
        (ann / f"trainlist{split:02d}.txt").write_bytes(crlf(train))
        (ann / f"testlist{split:02d}.txt").write_bytes(crlf(test))
    touch(root, [f"{name}/{file}" for name, files in UCF_VIDEOS.items() for file in files])
    return {"root": root, "ann": ann}


def test_ucf101_split_1_gives_exact_lists(ucf):
    made = ucf101_lists(ucf["root"], ucf["ann"], 1)

    assert made.name == "UCF101 split 1"
    assert made.classes == UCF_CLASSES
    assert made.classes_from == f"from {ucf['ann'] / 'classInd.txt'}"
    assert made.lists["train"] == [
        VideoEntry("ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi", 0, None, 1),
        VideoEntry("ApplyEyeMakeup/v_ApplyEyeMakeup_g25_c02.avi", 0, None, 2),
        VideoEntry("HandstandPushups/v_HandStandPushups_g09_c03.avi", 1, None, 3),
        VideoEntry("HandstandPushups/v_HandStandPushups_g15_c04.avi", 1, None, 4),
        VideoEntry("PlayingDaf/v_PlayingDaf_g10_c01.avi", 2, None, 5),
        VideoEntry("YoYo/v_YoYo_g14_c02.avi", 3, None, 6),
        VideoEntry("YoYo/v_YoYo_g20_c03.avi", 3, None, 7),
    ]
    assert made.lists["val"] == [
        VideoEntry("ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi", 0, None, 1),
        VideoEntry("HandstandPushups/v_HandStandPushups_g01_c01.avi", 1, None, 2),
        VideoEntry("PlayingDaf/v_PlayingDaf_g07_c05.avi", 2, None, 3),
        VideoEntry("YoYo/v_YoYo_g02_c01.avi", 3, None, 4),
    ]
    assert made.sources == {"train": str(ucf["ann"] / "trainlist01.txt"), "val": str(ucf["ann"] / "testlist01.txt")}
    assert made.notes == []
    made.check()


def test_ucf101_split_2_gives_exact_lists(ucf):
    made = ucf101_lists(ucf["root"], ucf["ann"], 2)

    assert made.name == "UCF101 split 2"
    assert [(e.path, e.label) for e in made.lists["train"]] == [
        ("ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi", 0),
        ("ApplyEyeMakeup/v_ApplyEyeMakeup_g25_c02.avi", 0),
        ("HandstandPushups/v_HandStandPushups_g01_c01.avi", 1),
        ("HandstandPushups/v_HandStandPushups_g15_c04.avi", 1),
        ("PlayingDaf/v_PlayingDaf_g07_c05.avi", 2),
        ("YoYo/v_YoYo_g02_c01.avi", 3),
        ("YoYo/v_YoYo_g20_c03.avi", 3),
    ]
    assert [(e.path, e.label) for e in made.lists["val"]] == [
        ("ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi", 0),
        ("HandstandPushups/v_HandStandPushups_g09_c03.avi", 1),
        ("PlayingDaf/v_PlayingDaf_g10_c01.avi", 2),
        ("YoYo/v_YoYo_g14_c02.avi", 3),
    ]


def test_ucf101_lists_rewritten_in_another_case_find_the_files_on_disk(ucf):
    """Guides rewrite v_HandStandPushups as v_HandstandPushups in the lists; the files keep the published name."""
    train, test = ucf_lists(1)
    (ucf["ann"] / "trainlist01.txt").write_bytes(crlf([t.replace("HandStand", "Handstand") for t in train]))
    (ucf["ann"] / "testlist01.txt").write_bytes(crlf([t.replace("ApplyEyeMakeup/", "applyeyemakeup/") for t in test]))

    made = ucf101_lists(ucf["root"], ucf["ann"], 1)

    assert made.lists["train"][2:4] == [
        VideoEntry("HandstandPushups/v_HandStandPushups_g09_c03.avi", 1, None, 3),
        VideoEntry("HandstandPushups/v_HandStandPushups_g15_c04.avi", 1, None, 4),
    ]
    assert made.lists["val"][0] == VideoEntry("ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi", 0, None, 1)
    assert made.notes == [
        "3 listed video(s) are on disk under another case (e.g. HandstandPushups/v_HandstandPushups_g09_c03.avi): "
        "listed as they are on disk",
        "1 listed video(s) name their class folder in another case than classInd.txt (e.g. "
        "applyeyemakeup/v_ApplyEyeMakeup_g01_c01.avi): given that class",
    ]


def test_ucf101_videos_not_on_disk_stay_listed(ucf):
    (ucf["root"] / "YoYo" / "v_YoYo_g20_c03.avi").unlink()

    made = ucf101_lists(ucf["root"], ucf["ann"], 1)

    assert made.lists["train"][-1] == VideoEntry("YoYo/v_YoYo_g20_c03.avi", 3, None, 7)
    assert made.missing("train") == [made.lists["train"][-1]]


@pytest.mark.parametrize(
    ("file", "lines", "message"),
    [
        ("classInd.txt", ["1 ApplyEyeMakeup", "2 HandstandPushups", "2 PlayingDaf"],
         "classInd.txt line 3: class index 2 is already on line 2 (HandstandPushups); each index once"),
        ("classInd.txt", ["1 ApplyEyeMakeup", "3 HandstandPushups"],
         "classInd.txt line 2: class index 3 where 2 was expected: classInd.txt numbers its classes 1, 2, 3, ..."),
        ("classInd.txt", ["1 ApplyEyeMakeup", "2 ApplyEyeMakeup"],
         "classInd.txt line 2: class ApplyEyeMakeup is already on line 1; each class once"),
        ("classInd.txt", ["1 ApplyEyeMakeup", "ApplyLipstick"],
         "classInd.txt line 2: expected 'index ClassName' (e.g. '1 ApplyEyeMakeup'), got 'ApplyLipstick'"),
        ("classInd.txt", [], "classInd.txt is empty; expected one class a line"),
        ("trainlist01.txt", ["ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi"],
         "trainlist01.txt line 1: expected 'Class/v_Class_gGG_cCC.avi label' (e.g. "
         "'ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1'), got 1 fields"),
        ("trainlist01.txt", ["ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1", "YoYo/v_YoYo_g14_c02.avi four"],
         "trainlist01.txt line 2: label 'four' is not an integer"),
        ("trainlist01.txt", ["YoYo/v_YoYo_g14_c02.avi 5"],
         "trainlist01.txt line 1: label 5 is out of range: "),
        ("trainlist01.txt", ["YoYo/v_YoYo_g14_c02.avi 0"], "trainlist01.txt line 1: label 0 is out of range: "),
        ("trainlist01.txt", ["YoYo/v_YoYo_g14_c02.avi 3"],
         "trainlist01.txt line 1: label 3 is PlayingDaf in "),
        ("trainlist01.txt", ["Archery/v_Archery_g08_c01.avi 1"],
         "trainlist01.txt line 1: class folder 'Archery' is not a class of "),
        ("trainlist01.txt", ["v_YoYo_g14_c02.avi 4"],
         "trainlist01.txt line 1: expected a path 'Class/video.avi' (its class folder, a slash, the file), got"),
        ("trainlist01.txt", ["YoYo/v_YoYo_g14_c02.avi 4", "", "YoYo/v_YoYo_g14_c02.avi 4"],
         "trainlist01.txt line 3: YoYo/v_YoYo_g14_c02.avi is already on line 1; each video once in a list"),
        ("trainlist01.txt", [], "trainlist01.txt is empty; expected one video a line"),
        ("testlist01.txt", ["Archery/v_Archery_g01_c01.avi"],
         "testlist01.txt line 1: class folder 'Archery' is not a class of "),
        ("testlist01.txt", ["YoYo/v_YoYo_g02_c01.avi 4 x"],
         "testlist01.txt line 1: expected 'Class/v_Class_gGG_cCC.avi'"),
    ],
)  # fmt: skip
def test_ucf101_broken_files_are_named_with_their_line(ucf, file, lines, message):
    (ucf["ann"] / file).write_bytes(crlf(lines))

    with raises(f"{ucf['ann'] / message.split(' ', 1)[0]} {message.split(' ', 1)[1]}"):
        ucf101_lists(ucf["root"], ucf["ann"], 1)


def test_ucf101_missing_inputs_and_split_are_named(ucf, tmp_path):
    with raises("UCF101 has splits 1, 2 and 3, not 4; set data.ucf101.split to 1, 2 or 3"):
        ucf101_lists(ucf["root"], ucf["ann"], 4)
    with raises("UCF101 has splits 1, 2 and 3, not '1'"):
        ucf101_lists(ucf["root"], ucf["ann"], "1")  # type: ignore[arg-type]
    with raises(f"data.ucf101.annotations {tmp_path / 'nowhere'} is not a folder; give it the extracted "
                "ucfTrainTestlist folder"):  # fmt: skip
        ucf101_lists(ucf["root"], tmp_path / "nowhere", 1)
    with raises("data.ucf101.annotations is not set"):
        ucf101_lists(ucf["root"], "", 1)
    with raises(f"data.root {tmp_path / 'videos'} is not a folder; give the extracted UCF-101 folder"):
        ucf101_lists(tmp_path / "videos", ucf["ann"], 1)
    (ucf["ann"] / "trainlist02.txt").unlink()
    with raises(f"trainlist02.txt not in {ucf['ann']}: give data.ucf101.annotations the extracted ucfTrainTestlist "
                "folder"):  # fmt: skip
        ucf101_lists(ucf["root"], ucf["ann"], 2)
    with raises(f"classInd.txt not in {tmp_path}: give data.ucf101.annotations the extracted ucfTrainTestlist folder "
                f"({ucf['ann']} holds it: give that folder)"):  # fmt: skip
        ucf101_lists(ucf["root"], tmp_path, 1)


# HMDB51: testTrainMulti_7030_splits/<class>_test_split<N>.txt, "<video>.avi <tag> " (1 train, 2 test, 0 unused).
HMDB_VIDEOS = {  # class -> its videos, with their tags in splits 1 and 2
    "brush_hair": [
        ("April_09_brush_hair_u_nm_np1_ba_goo_0.avi", 1, 2),
        ("April_09_brush_hair_u_nm_np1_ba_goo_1.avi", 2, 1),
        ("Brushing_&_Styling_brush_hair_h_nm_np1_le_goo_0.avi", 1, 1),
    ],
    "cartwheel": [
        ("(Rad)Schlag_die_Bank!_cartwheel_f_cm_np1_le_med_0.avi", 1, 1),
        ("Acrobacias_de_un_fenomeno_cartwheel_f_cm_np1_ba_bad_8.avi", 2, 0),
        ("#122_Cartwheel_Practice_cartwheel_f_nm_np1_ri_med_0.avi", 0, 2),
    ],
    "climb_stairs": [
        ("Stairs_climb_stairs_f_cm_np1_fr_med_0.avi", 1, 2),
        ("Stairs_climb_stairs_f_cm_np1_fr_med_1.avi", 2, 1),
    ],
    "climb": [
        ("Rock_Climbing_climb_f_cm_np1_ba_med_0.avi", 2, 1),
        ("Rock_Climbing_climb_f_cm_np1_ba_med_1.avi", 1, 2),
        ("Rock_Climbing_climb_f_cm_np1_ba_med_2.avi", 0, 1),
    ],
}
HMDB_CLASSES = ["brush_hair", "cartwheel", "climb", "climb_stairs"]  # by class name: climb before climb_stairs


def hmdb_text(videos: list[tuple[str, int, int]], split: int) -> str:
    return "".join(f"{name} {tags[split - 1]} \n" for name, *tags in videos)


@pytest.fixture
def hmdb(tmp_path: Path) -> dict[str, Path]:
    root, ann = tmp_path / "hmdb51", tmp_path / "testTrainMulti_7030_splits"
    ann.mkdir()
    for name, videos in HMDB_VIDEOS.items():
        for split in (1, 2, 3):
            (ann / f"{name}_test_split{split}.txt").write_text(hmdb_text(videos, min(split, 2)), encoding="utf-8")
        touch(root, [f"{name}/{video}" for video, *_ in videos])
    return {"root": root, "ann": ann}


def test_hmdb51_split_1_gives_exact_lists(hmdb):
    made = hmdb51_lists(hmdb["root"], hmdb["ann"], 1)

    assert made.name == "HMDB51 split 1"
    assert made.classes == HMDB_CLASSES
    assert made.lists["train"] == [
        VideoEntry("brush_hair/April_09_brush_hair_u_nm_np1_ba_goo_0.avi", 0, None, 1),
        VideoEntry("brush_hair/Brushing_&_Styling_brush_hair_h_nm_np1_le_goo_0.avi", 0, None, 3),
        VideoEntry("cartwheel/(Rad)Schlag_die_Bank!_cartwheel_f_cm_np1_le_med_0.avi", 1, None, 1),
        VideoEntry("climb/Rock_Climbing_climb_f_cm_np1_ba_med_1.avi", 2, None, 2),
        VideoEntry("climb_stairs/Stairs_climb_stairs_f_cm_np1_fr_med_0.avi", 3, None, 1),
    ]
    assert made.lists["val"] == [
        VideoEntry("brush_hair/April_09_brush_hair_u_nm_np1_ba_goo_1.avi", 0, None, 2),
        VideoEntry("cartwheel/Acrobacias_de_un_fenomeno_cartwheel_f_cm_np1_ba_bad_8.avi", 1, None, 2),
        VideoEntry("climb/Rock_Climbing_climb_f_cm_np1_ba_med_0.avi", 2, None, 1),
        VideoEntry("climb_stairs/Stairs_climb_stairs_f_cm_np1_fr_med_1.avi", 3, None, 2),
    ]
    assert made.sources == {"train": f"{hmdb['ann']}/<class>_test_split1.txt (tag 1)",
                            "val": f"{hmdb['ann']}/<class>_test_split1.txt (tag 2)"}  # fmt: skip
    assert made.notes == ["2 video(s) tagged 0 (not in split 1) left out"]
    made.check()


def test_hmdb51_split_2_gives_exact_lists(hmdb):
    made = hmdb51_lists(hmdb["root"], hmdb["ann"], 2)

    assert made.classes == HMDB_CLASSES
    assert [(e.path, e.label) for e in made.lists["train"]] == [
        ("brush_hair/April_09_brush_hair_u_nm_np1_ba_goo_1.avi", 0),
        ("brush_hair/Brushing_&_Styling_brush_hair_h_nm_np1_le_goo_0.avi", 0),
        ("cartwheel/(Rad)Schlag_die_Bank!_cartwheel_f_cm_np1_le_med_0.avi", 1),
        ("climb/Rock_Climbing_climb_f_cm_np1_ba_med_0.avi", 2),
        ("climb/Rock_Climbing_climb_f_cm_np1_ba_med_2.avi", 2),
        ("climb_stairs/Stairs_climb_stairs_f_cm_np1_fr_med_1.avi", 3),
    ]
    assert [(e.path, e.label) for e in made.lists["val"]] == [
        ("brush_hair/April_09_brush_hair_u_nm_np1_ba_goo_0.avi", 0),
        ("cartwheel/#122_Cartwheel_Practice_cartwheel_f_nm_np1_ri_med_0.avi", 1),
        ("climb/Rock_Climbing_climb_f_cm_np1_ba_med_1.avi", 2),
        ("climb_stairs/Stairs_climb_stairs_f_cm_np1_fr_med_0.avi", 3),
    ]
    assert made.notes == ["1 video(s) tagged 0 (not in split 2) left out"]


def test_hmdb51_names_with_hash_survive_the_written_lists(hmdb, tmp_path):
    made = write_dataset(hmdb51_lists(hmdb["root"], hmdb["ann"], 2), tmp_path / "out", log=lambda _: None)

    assert read_list(tmp_path / "out" / "val_labels.txt") == [
        VideoEntry(e.path, e.label, None, n) for n, e in enumerate(made.lists["val"], start=1)
    ]
    assert (tmp_path / "out" / "classes.txt").read_text() == "".join(f"{c}\n" for c in HMDB_CLASSES)


def test_hmdb51_class_without_val_video_is_noted(hmdb):
    (hmdb["ann"] / "climb_test_split1.txt").write_text(hmdb_text(HMDB_VIDEOS["climb"][1:], 1), encoding="utf-8")

    made = hmdb51_lists(hmdb["root"], hmdb["ann"], 1)

    assert [e.path for e in made.lists["val"] if e.label == 2] == []
    assert made.notes == [
        "2 video(s) tagged 0 (not in split 1) left out",
        "class(es) with no val video (tag 2) in split 1: climb",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x.avi 1 \ny.avi 3 \n", "line 2: tag '3' is not 0 (not in this split), 1 (train) or 2 (test)"),
        ("x.avi 1 \ny.avi\n", "line 2: expected '<video>.avi <tag>' with the tag 0, 1 or 2 (e.g. "
                              "'April_09_brush_hair_u_nm_np1_ba_goo_0.avi 1'), got 1 fields: 'y.avi'"),
        ("x.avi 1 extra\n", "line 1: expected '<video>.avi <tag>'"),
        ("x.avi 1 \nx.avi 2 \n", "line 2: x.avi is already on line 1; each video once"),
        ("climb/x.avi 1 \n", "line 1: expected a file name, got the path 'climb/x.avi'"),
    ],
)  # fmt: skip
def test_hmdb51_broken_lines_are_named(hmdb, text, message):
    path = hmdb["ann"] / "climb_test_split1.txt"
    path.write_text(text, encoding="utf-8")

    with raises(f"{path} {message}"):
        hmdb51_lists(hmdb["root"], hmdb["ann"], 1)


def test_hmdb51_missing_inputs_and_split_are_named(hmdb, tmp_path):
    empty = hmdb["ann"] / "cartwheel_test_split2.txt"
    empty.write_text("\n", encoding="utf-8")
    with raises(f"{empty} is empty; expected one video of class cartwheel a line"):
        hmdb51_lists(hmdb["root"], hmdb["ann"], 2)
    with raises("HMDB51 has splits 1, 2 and 3, not 0; set data.hmdb51.split to 1, 2 or 3"):
        hmdb51_lists(hmdb["root"], hmdb["ann"], 0)
    with raises(f"no <class>_test_split1.txt in {tmp_path}: give data.hmdb51.annotations the extracted "
                f"testTrainMulti_7030_splits folder ({hmdb['ann']} holds them: give that folder)"):  # fmt: skip
        hmdb51_lists(hmdb["root"], tmp_path, 1)
    with raises(f"data.hmdb51.annotations {tmp_path / 'rar'} is not a folder"):
        hmdb51_lists(hmdb["root"], tmp_path / "rar", 1)


# Something-Something v2: labels.json (name -> index as a string), train.json and validation.json (records).
SSV2_LABELS = {  # the classes as labels.json names them, not in index order here
    "Approaching something with your camera": "0",
    "Something falling like a feather or paper": "3",
    "Holding something next to something": "2",
    "Bending something until it breaks": "1",
}
SSV2_CLASSES = [
    "Approaching something with your camera",
    "Bending something until it breaks",
    "Holding something next to something",
    "Something falling like a feather or paper",
]
SSV2_TRAIN = [  # (id, template, placeholders)
    ("78687", "Holding [something] next to [something]", ["potato", "vicks vaporub bottle"]),
    ("42326", "[Something] falling like a feather or paper", ["a tissue"]),
    ("100904", "Approaching [something] with your camera", ["a cup"]),
    ("3694", "Bending [something] until it breaks", ["a twig"]),
    ("22417", "Holding [something] next to [something]", ["a pen", "a mug"]),
    ("147305", "Approaching [something] with your camera", ["a book"]),
    ("9999", "Bending [something] until it breaks", ["a pencil"]),
    ("186", "[Something] falling like a feather or paper", ["a feather"]),
]
SSV2_VAL = [
    ("74225", "Bending [something] until it breaks", ["a stick"]),
    ("116154", "[Something] falling like a feather or paper", ["paper"]),
    ("198186", "Approaching [something] with your camera", ["a remote"]),
    ("137878", "Holding [something] next to [something]", ["a phone", "a cup"]),
]


def ssv2_record(video: str, template: str, objects: list[str]) -> dict:
    label = template
    for thing in objects:
        label = label.replace("[something]", thing, 1).replace("[Something]", thing, 1)
    return {"id": video, "label": label, "template": template, "placeholders": objects}


@pytest.fixture
def ssv2(tmp_path: Path) -> dict[str, Path]:
    root, ann = tmp_path / "20bn-something-something-v2", tmp_path / "labels"
    ann.mkdir()
    (ann / "labels.json").write_text(json.dumps(SSV2_LABELS, indent=1), encoding="utf-8")
    # train.json one record a line; validation.json indented, each record over 6 lines
    records = [json.dumps(ssv2_record(*r)) for r in SSV2_TRAIN]
    (ann / "train.json").write_text("[\n" + ",\n".join(records) + "\n]", encoding="utf-8")
    text = json.dumps([ssv2_record(*r) for r in SSV2_VAL], indent=4)
    text = text.replace('[\n            "', '["').replace('"\n        ]', '"]').replace('",\n            "', '", "')
    (ann / "validation.json").write_text(text, encoding="utf-8")
    (ann / "test.json").write_text(json.dumps([{"id": "1420"}]), encoding="utf-8")
    touch(root, [f"{video}.webm" for video, *_ in SSV2_TRAIN + SSV2_VAL])
    return {"root": root, "ann": ann}


def test_ssv2_gives_exact_lists(ssv2):
    made = ssv2_lists(ssv2["root"], ssv2["ann"])

    assert made.name == "Something-Something v2"
    assert made.classes == SSV2_CLASSES
    assert made.classes_from == f"from {ssv2['ann'] / 'labels.json'}"
    assert made.lists["train"] == [
        VideoEntry("78687.webm", 2, None, 2),
        VideoEntry("42326.webm", 3, None, 3),
        VideoEntry("100904.webm", 0, None, 4),
        VideoEntry("3694.webm", 1, None, 5),
        VideoEntry("22417.webm", 2, None, 6),
        VideoEntry("147305.webm", 0, None, 7),
        VideoEntry("9999.webm", 1, None, 8),
        VideoEntry("186.webm", 3, None, 9),
    ]
    assert (ssv2["ann"] / "validation.json").read_text().splitlines()[7] == "    {"
    assert made.lists["val"] == [
        VideoEntry("74225.webm", 1, None, 2),
        VideoEntry("116154.webm", 3, None, 8),
        VideoEntry("198186.webm", 0, None, 14),
        VideoEntry("137878.webm", 2, None, 20),
    ]
    assert made.sources == {"train": str(ssv2["ann"] / "train.json"), "val": str(ssv2["ann"] / "validation.json")}
    made.check()


def test_ssv2_files_named_as_pyslowfast_names_them_are_read(ssv2):
    for name in ("labels.json", "train.json", "validation.json"):
        (ssv2["ann"] / name).rename(ssv2["ann"] / f"something-something-v2-{name}")

    made = ssv2_lists(ssv2["root"], ssv2["ann"])

    assert made.classes == SSV2_CLASSES
    assert [e.path for e in made.lists["val"]] == ["74225.webm", "116154.webm", "198186.webm", "137878.webm"]


def ssv2_train(ssv2: dict[str, Path], records: list) -> Path:
    """train.json of ``records`` (dicts or other JSON), one a line from line 2."""
    path = ssv2["ann"] / "train.json"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n", encoding="utf-8")
    return path


def good(n: int) -> list[dict]:
    return [ssv2_record(*r) for r in SSV2_TRAIN[:n]]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (good(2) + [{"id": "5", "template": "Spinning [something] so it continues spinning"}],
         "line 4: record [2] (id '5'): template 'Spinning [something] so it continues spinning' (as a class: "
         "'Spinning something so it continues spinning') is not in "),
        (good(3) + [ssv2_record("78687", "Bending [something] until it breaks", [])],
         "line 5: record [3] (id '78687'): the id is already record [0] (line 2); each video once in a split"),
        (good(1) + [{"template": "Bending [something] until it breaks"}],
         "line 3: record [1]: \"id\" is missing; expected the video's id, a string like \"78687\""),
        (good(1) + [{"id": None, "template": "Bending [something] until it breaks"}],
         "line 3: record [1]: \"id\" is null; expected the video's id"),
        (good(1) + [{"id": "5"}], "line 3: record [1] (id '5'): \"template\" is missing; expected a string like"),
        (good(1) + [{"id": "5", "template": 7}], "line 3: record [1] (id '5'): \"template\" is 7;"),
        (good(1) + [["5", "Bending [something] until it breaks"]], "line 3: record [1] is a list, not an object"),
        (good(1) + [{"id": "../5", "template": "Bending [something] until it breaks"}],
         "line 3: record [1]: id '../5' is no file name"),
    ],
)  # fmt: skip
def test_ssv2_bad_records_are_named_with_line_index_and_id(ssv2, records, message):
    path = ssv2_train(ssv2, records)

    with raises(f"{path} {message}"):
        ssv2_lists(ssv2["root"], ssv2["ann"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[\n{"id": "1", "template": "x"},\n{"id": "2" "template": "x"}\n]',
         "line 3 is not JSON (Expecting ',' delimiter, column 12); expected a list of records"),
        ('[\n{"id": "1", "template": "x"}\n{"id": "2"}\n]', "line 3 is not JSON (Expecting ',' delimiter, column 1)"),
        ('[\n{"id": "1", "template": "x"}\n]\n]', "line 4 is not JSON (Extra data, column 1)"),
        ('{"id": "1", "template": "x"}', "holds an object, not a list; expected a list of records"),
        ("[]", "holds no record; expected a list of records"),
        (" \n", "is empty; expected a list of records"),
    ],
)  # fmt: skip
def test_ssv2_broken_json_is_named_with_its_line(ssv2, text, message):
    path = ssv2["ann"] / "train.json"
    path.write_text(text, encoding="utf-8")

    with raises(f"{path} {message}"):
        ssv2_lists(ssv2["root"], ssv2["ann"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{\n "Approaching something with your camera": "0",\n "Bending something until it breaks": "2"\n}',
         "line 3: index 2 of class 'Bending something until it breaks', but no class has index 1: the 2 indices "
         "must run 0..1, each once"),
        ('{\n "Approaching something with your camera": "0",\n "Bending something until it breaks": "0"\n}',
         "line 3: index 0 of class 'Bending something until it breaks' is already class 'Approaching something "
         "with your camera'; each index once"),
        ('{\n "Approaching something with your camera": "0",\n "Approaching something with your camera": "1"\n}',
         "line 2: class 'Approaching something with your camera' is named twice; each class once"),
        ('{\n "Approaching something with your camera": "zero"\n}',
         "line 2: the index of class 'Approaching something with your camera' is \"zero\"; expected a whole number"),
        ('{\n "Approaching something with your camera": "0",\n}', "line 3 is not JSON (Expecting property name"),
        ('["Approaching something with your camera"]', "holds a list, not an object; expected one object"),
        ("{}", "holds no class"),
        ("", "is empty"),
    ],
)  # fmt: skip
def test_ssv2_broken_labels_are_named_with_their_line(ssv2, text, message):
    path = ssv2["ann"] / "labels.json"
    path.write_text(text, encoding="utf-8")

    with raises(f"{path} {message}"):
        ssv2_lists(ssv2["root"], ssv2["ann"])


def test_ssv2_missing_files_are_named(ssv2, tmp_path):
    (ssv2["ann"] / "validation.json").unlink()
    with raises(f"validation.json not in {ssv2['ann']} (nor something-something-v2-validation.json): give "
                "data.ssv2.annotations the folder of labels.json, train.json and validation.json"):  # fmt: skip
        ssv2_lists(ssv2["root"], ssv2["ann"])
    with raises(f"labels.json not in {tmp_path} (nor something-something-v2-labels.json)"):
        ssv2_lists(ssv2["root"], tmp_path)
    with raises("data.ssv2.annotations is not set"):
        ssv2_lists(ssv2["root"], "")


# Kinetics-600 and -700-2020: the CSVs of Kinetics-400's form (label,youtube_id,time_start,time_end,split), read as
# they are by clipflow.data.kinetics; their test CSVs have no label column.
K600_HEADER = "label,youtube_id,time_start,time_end,split"
K600_TRAIN = [
    "abseiling,0wR5jVB-WPk,417,427,train",
    "acting in play,08MqsEmN19s,19,29,train",
    "adjusting glasses,-7O581Lzrb4,154,164,train",
    "air drumming,--nQbRBEz2s,104,114,train",
    "abseiling,3caPS4FHFF8,36,46,train",
    "acting in play,3fNo1qOOIzQ,0,10,train",
    "adjusting glasses,0kz8c1GGOkI,162,172,train",
    "air drumming,2cPLjY5AWXU,1,11,train",
]
K600_VAL = [
    "air drumming,6929uJdI-iU,1,11,val",
    "adjusting glasses,0zxkyPzmVwY,94,104,val",
    "acting in play,3farXV8FokA,197,207,val",
    "abseiling,3yaoNwz99xM,62,72,val",
]
K600_CLASSES = ["abseiling", "acting in play", "adjusting glasses", "air drumming"]


def kinetics_tree(tmp_path: Path, header: str, extra: str = "") -> dict[str, Path]:
    """train.csv and validate.csv with ``header``, each row with ``extra`` appended, and the videos in label
    folders."""
    root = tmp_path / "videos"
    for name, rows in (("train.csv", K600_TRAIN), ("validate.csv", K600_VAL)):
        (tmp_path / name).write_text("".join(f"{r}\n" for r in [header, *(row + extra for row in rows)]))
    for row in K600_TRAIN + K600_VAL:
        label, video, start, end, _ = row.split(",")
        touch(root, [f"{label}/{video}_{int(start):06d}_{int(end):06d}.mp4"])
    return {"train": tmp_path / "train.csv", "val": tmp_path / "validate.csv", "root": root}


def k600_expected(rows: list[str]) -> list[VideoEntry]:
    entries = []
    for line, row in enumerate(rows, start=2):
        label, video, start, end, _ = row.split(",")
        path = f"{label}/{video}_{int(start):06d}_{int(end):06d}.mp4"
        entries.append(VideoEntry(path, K600_CLASSES.index(label), None, line))
    return entries


@pytest.mark.parametrize(
    ("header", "extra"),
    [(K600_HEADER, ""), (f"{K600_HEADER},is_cc", ",0")],
    ids=["kinetics600", "with-is_cc-column"],
)
def test_kinetics600_and_700_csvs_are_read_as_they_are(tmp_path, header, extra):
    tree = kinetics_tree(tmp_path, header, extra)

    made = kinetics_lists(tree["train"], tree["val"], tree["root"])

    assert made.classes == K600_CLASSES
    assert made.lists["train"].entries == k600_expected(K600_TRAIN)
    assert made.lists["val"].entries == k600_expected(K600_VAL)
    assert made.lists["train"].missing == made.lists["val"].missing == []


def test_kinetics600_test_csv_without_label_column_gives_unlabelled_rows(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text("youtube_id,time_start,time_end,split\n--65_UAU7ao,0,10,test\n--6zxbYq5M4,39,49,test\n")

    rows = read_annotations(path)

    assert [(r.label, r.filename, r.split, r.line) for r in rows] == [
        (None, "--65_UAU7ao_000000_000010.mp4", "test", 2),
        (None, "--6zxbYq5M4_000039_000049.mp4", "test", 3),
    ]


def test_the_helpers_trees_read_back_with_the_readers(tmp_path):
    ucf = make_ucf101(tmp_path / "ucf", per_class=3)
    hmdb = make_hmdb51(tmp_path / "hmdb", per_class=3)
    ssv2 = make_ssv2(tmp_path / "ssv2", per_class=3)
    k600 = make_kinetics600(tmp_path / "k600", per_class=3)

    for made in [ucf101_lists(ucf["root"], ucf["annotations"], s) for s in (1, 2, 3)] + [
        hmdb51_lists(hmdb["root"], hmdb["annotations"], s) for s in (1, 2, 3)
    ] + [ssv2_lists(ssv2["root"], ssv2["annotations"])]:  # fmt: skip
        made.check()
        assert len(made.classes) == 3
        assert made.missing("train") == made.missing("val") == [] and made.notes == []
        for split, least in (("train", 2), ("val", 1)):
            assert all(sum(e.label == c for e in made.lists[split]) >= least for c in range(3)), (made.name, split)
    kinetics = kinetics_lists(k600["train_csv"], k600["val_csv"], k600["root"])
    assert [len(kinetics.lists[s].entries) for s in ("train", "val")] == [6, 3]
    assert kinetics.lists["train"].missing == kinetics.lists["val"].missing == []
