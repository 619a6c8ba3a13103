"""Kinetics annotation CSVs: rows, the class index, both folder layouts, and every broken input."""

import numpy as np
import pytest

from clipflow.data.kinetics import (
    NO_LABEL,
    class_names,
    load_kinetics,
    read_annotations,
    read_classes,
    write_classes,
)
from clipflow.data.listfile import VideoEntry
from clipflow.data.scan import scan
from clipflow.data.synthetic import write_video
from clipflow.errors import ClipflowError

HEADER = "label,youtube_id,time_start,time_end,split\n"
TRICKY = (
    HEADER
    + '"passing American football (in game)",-abc_DEF123,14,24,train\n'
    + "massaging person's head,xyz0000001X,0.0,10.0,train\n"
    + '"cooking, sausages",aaa,100,110,train\n'
    + "\n"
    + "abseiling,bbb,5,15,train\n"
    + "massaging person's head,ccc,3,13,train\n"
)
TRICKY_CLASSES = ["abseiling", "cooking, sausages", "massaging person's head", "passing American football (in game)"]


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tricky_names_give_exact_entries_and_classes_txt(tmp_path):
    csv = write(tmp_path / "train.csv", TRICKY)

    entries, classes = load_kinetics(csv, tmp_path / "videos")
    write_classes(tmp_path / "index" / "classes.txt", classes)

    assert classes == TRICKY_CLASSES
    assert (tmp_path / "index" / "classes.txt").read_text(encoding="utf-8") == "".join(f"{c}\n" for c in classes)
    assert read_classes(tmp_path / "index" / "classes.txt") == classes
    assert entries == {
        "train": [
            VideoEntry("-abc_DEF123_000014_000024.mp4", 3, None, 2),
            VideoEntry("xyz0000001X_000000_000010.mp4", 2, None, 3),
            VideoEntry("aaa_000100_000110.mp4", 1, None, 4),
            VideoEntry("bbb_000005_000015.mp4", 0, None, 6),
            VideoEntry("ccc_000003_000013.mp4", 2, None, 7),
        ]
    }


@pytest.mark.parametrize("layout", ["flat", "label", "underscores"])
def test_videos_are_found_in_either_layout(tmp_path, layout):
    csv = write(tmp_path / "train.csv", TRICKY)
    root = tmp_path / "videos"
    expected = []
    for row in read_annotations(csv):
        folder = {"flat": "", "label": row.label, "underscores": row.label.replace(" ", "_")}[layout]
        rel = f"{folder}/{row.filename}" if folder else row.filename
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
        expected.append(rel)
    entries, _ = load_kinetics(csv, root)
    assert [e.path for e in entries["train"]] == expected
    if layout == "underscores":
        assert expected[0] == "passing_American_football_(in_game)/-abc_DEF123_000014_000024.mp4"


def test_missing_videos_are_kept_and_scanned_as_not_found(tmp_path):
    csv = write(
        tmp_path / "train.csv",
        HEADER + "abseiling,aaa,1,11,train\nbaking cookies,bbb,2,12,train\nabseiling,ccc,3,13,train\n",
    )
    root = tmp_path / "videos"
    (root / "baking_cookies").mkdir(parents=True)
    frames = np.random.default_rng(0).integers(0, 256, (12, 48, 64, 3), dtype=np.uint8)
    write_video(root / "baking_cookies" / "bbb_000002_000012.mp4", frames, 25, 16)
    write_video(root / "ccc_000003_000013.mp4", frames[:10], 25, 16)

    entries, classes = load_kinetics(csv, root)
    results = scan(entries["train"], root)

    assert [e.path for e in entries["train"]] == [
        "aaa_000001_000011.mp4",  # missing, and no abseiling folder: directly under root
        "baking_cookies/bbb_000002_000012.mp4",
        "ccc_000003_000013.mp4",
    ]
    measured = [(r.label, r.num_frames, r.error) for r in results]
    assert measured == [(0, 0, "file not found"), (1, 12, None), (0, 10, None)]
    # a missing video whose label folder exists is looked for in that folder
    (root / "baking_cookies" / "bbb_000002_000012.mp4").unlink()
    assert load_kinetics(csv, root)[0]["train"][1].path == "baking_cookies/bbb_000002_000012.mp4"


def test_class_index_file_is_shared_by_train_and_val(tmp_path):
    write_classes(tmp_path / "classes.txt", class_names(read_annotations(write(tmp_path / "train.csv", TRICKY))))
    val = write(tmp_path / "val.csv", HEADER + "massaging person's head,vvv,0,10,val\n")

    own_entries, own_classes = load_kinetics(val, tmp_path)
    shared_entries, shared_classes = load_kinetics(val, tmp_path, tmp_path / "classes.txt")

    assert own_classes == ["massaging person's head"] and own_entries["val"][0].label == 0
    assert shared_classes == TRICKY_CLASSES and shared_entries["val"][0].label == 2

    write(tmp_path / "val.csv", HEADER + "abseiling,vvv,0,10,val\nskydiving,www,0,10,val\n")
    message = r"val\.csv line 3: label 'skydiving' is not in the class index \(4 classes\)"
    with pytest.raises(ClipflowError, match=message):
        load_kinetics(tmp_path / "val.csv", tmp_path, tmp_path / "classes.txt")


def test_test_rows_may_lack_labels(tmp_path):
    write_classes(tmp_path / "classes.txt", ["abseiling", "zumba"])
    mixed = write(tmp_path / "mixed.csv", HEADER + "zumba,a,1,11,train\n,b,2,12,test\nzumba,c,3,13,test\n")
    official_test = write(tmp_path / "test.csv", "youtube_id,time_start,time_end,split\nd,4,14,test\n")

    entries, _ = load_kinetics(mixed, tmp_path, tmp_path / "classes.txt")
    test_only, _ = load_kinetics(official_test, tmp_path, tmp_path / "classes.txt")

    assert {split: [(e.path, e.label, e.line) for e in es] for split, es in entries.items()} == {
        "train": [("a_000001_000011.mp4", 1, 2)],
        "test": [("b_000002_000012.mp4", NO_LABEL, 3), ("c_000003_000013.mp4", 1, 4)],
    }
    assert test_only == {"test": [VideoEntry("d_000004_000014.mp4", NO_LABEL, None, 2)]}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"ann\.csv is empty"),
        (HEADER, r"ann\.csv has a header but no rows"),
        ("label,youtube_id,time_start,split\nx,a,1,train\n", r"ann\.csv line 1: header lacks column\(s\) time_end"),
        ("label,id,start,end,split\nx,a,1,2,train\n", r"header lacks column\(s\) youtube_id, time_start, time_end"),
        (HEADER + "abseiling,a,1,11\n", r"ann\.csv line 2: expected 5 columns as in the header, got 4"),
        (HEADER + "x,a,1,11,train\n\n" + '"a, b",c,1,11,train,extra\n', r"ann\.csv line 4: expected 5 columns"),
        (HEADER + "abseiling,a,1.5,11,train\n", r"line 2: time_start must be a whole, non-negative number of seconds"),
        (HEADER + "abseiling,a,1,ten,train\n", r"line 2: time_end must be a whole, non-negative number of seconds"),
        (HEADER + "abseiling,a,-1,11,train\n", r"line 2: time_start must be a whole"),
        (HEADER + "abseiling,a,11,11,train\n", r"ann\.csv line 2: time_end 11 must be after time_start 11"),
        (HEADER + "abseiling,a,12.0,11,train\n", r"line 2: time_end 11 must be after time_start 12"),
        (HEADER + "abseiling,,1,11,train\n", r"ann\.csv line 2: empty youtube_id"),
        (HEADER + "abseiling,a,1,11,validation\n", r"ann\.csv line 2: unknown split 'validation'"),
        (HEADER + ",a,1,11,val\n", r"ann\.csv line 2: a val row needs a label"),
        (HEADER + '"abseiling,a,1,11,train\n', r"ann\.csv line 2: not a valid CSV line"),
    ],
)
def test_broken_csv_names_file_and_line(tmp_path, text, message):
    csv = write(tmp_path / "ann.csv", text)
    with pytest.raises(ClipflowError, match=message):
        load_kinetics(csv, tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a\n\nb\n", r"classes\.txt line 2: empty class name"),
        ("a\nb\na\n", r"classes\.txt line 3: class 'a' already on line 1"),
        ("", r"classes\.txt is empty"),
    ],
)
def test_broken_class_index_names_file_and_line(tmp_path, text, message):
    write(tmp_path / "classes.txt", text)
    with pytest.raises(ClipflowError, match=message):
        read_classes(tmp_path / "classes.txt")


def test_missing_inputs_are_named(tmp_path):
    with pytest.raises(ClipflowError, match=r"annotation file .*nope\.csv does not exist"):
        read_annotations(tmp_path / "nope.csv")
    with pytest.raises(ClipflowError, match=r"class-index file .*nope\.txt does not exist"):
        read_classes(tmp_path / "nope.txt")


def test_list_paths_may_hold_spaces_as_kinetics_label_folders_do(tmp_path):
    from clipflow.data.listfile import read_list, write_labels, write_list

    entries = [
        VideoEntry("passing American football (in game)/-abc_000014_000024.mp4", 3, None, 1),
        VideoEntry("cooking, sausages/a  b.mkv", 1, None, 2),
        VideoEntry("tàijí quán/x.mp4", 0, None, 3),
        VideoEntry("plain.mp4", 2, None, 4),
    ]
    write_labels(tmp_path / "short.txt", entries)
    assert read_list(tmp_path / "short.txt") == entries
    write_list(tmp_path / "long.lst", [VideoEntry(e.path, e.label, 10 + e.label, e.line) for e in entries])
    assert [(e.path, e.num_frames, e.label) for e in read_list(tmp_path / "long.lst")] == [
        (e.path, 10 + e.label, e.label) for e in entries
    ]
    # a path with spaces must end in an extension: else the extra fields are the error they look like
    for text, message in [("a.mp4 x 3\n", "label and frame count must be integers"), ("a.mp4 1 2 3\n", "4 fields")]:
        write(tmp_path / "bad.lst", text)
        with pytest.raises(ClipflowError, match=message):
            read_list(tmp_path / "bad.lst")
