"""`clipflow data kinetics` and `clipflow data reencode` as real processes on trees of real videos made here."""

from __future__ import annotations

import json
from pathlib import Path

import av
import pytest
from helpers import clipflow
from kinetics_helpers import CLASSES, FRAMES, HEADER, TAIJI, TRAIN_LIST, VAL_CSV, VAL_LIST, make_kinetics_tree
from reencode_helpers import write_counter_video

from clipflow.data.reader import NOT_A_CONTAINER
from clipflow.data.reencode import JOURNAL


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> dict[str, Path]:
    return make_kinetics_tree(tmp_path_factory.mktemp("kinetics"))


def kinetics(tree: dict[str, Path], out: Path, *extra: str):
    return clipflow(
        "data", "kinetics", "--train-csv", str(tree["train_csv"]), "--val-csv", str(tree["val_csv"]),
        "--root", str(tree["root"]), "--out-dir", str(out), *extra,
    )  # fmt: skip


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_lists_classes_and_counts_then_the_scan(tree, tmp_path):
    out = tmp_path / "lists"
    done = kinetics(tree, out)
    assert done.returncode == 0, done.stderr

    assert lines(out / "classes.txt") == CLASSES
    assert lines(out / "train_labels.txt") == TRAIN_LIST
    assert lines(out / "val_labels.txt") == VAL_LIST
    assert f"train: 5 videos from {tree['train_csv']}" in done.stdout
    assert f"; 1 not found under {tree['root']} (kept: the scan lists them as failures)" in done.stdout
    assert f"train: 1 unlabelled (test) rows of {tree['train_csv']} left out" in done.stdout
    assert f"val: 3 videos from {tree['val_csv']} in {out / 'val_labels.txt'}\n" in done.stdout
    assert f"not found (train): tàijí_quán/eee_000003_000013.mp4 ({tree['train_csv']} line 6)" in done.stdout
    assert f"Kinetics: 3 classes (the sorted labels of {tree['train_csv']})" in done.stdout

    # the scan reads the lists, paths with spaces and non-ASCII included, and lists the missing video as a failure
    scanned = clipflow(
        "data", "scan", "--train-list", str(out / "train_labels.txt"), "--val-list", str(out / "val_labels.txt"),
        "--root", str(tree["root"]), "--num-classes", "3", "--classes", str(out / "classes.txt"),
        "--out-dir", str(out / "index"), "--workers", "1",
    )  # fmt: skip
    assert scanned.returncode == 0, scanned.stderr
    manifest = json.loads((out / "index" / "manifest.json").read_text())
    assert manifest["classes"] == CLASSES
    assert {s: (v["videos"], v["failed"]) for s, v in manifest["splits"].items()} == {"train": (4, 1), "val": (3, 0)}
    assert [(f["path"], f["line"], f["error"]) for f in manifest["failures"]] == [
        ("tàijí_quán/eee_000003_000013.mp4", 5, "file not found")
    ]
    assert lines(out / "index" / "train.lst") == [f"{x.rsplit(' ', 1)[0]} {FRAMES} {x[-1]}" for x in TRAIN_LIST[:4]]

    # a model with fewer outputs than the class index has classes is refused before any decoding
    too_few = clipflow(
        "data", "scan", "--train-list", str(out / "train_labels.txt"), "--val-list", str(out / "val_labels.txt"),
        "--root", str(tree["root"]), "--num-classes", "2", "--classes", str(out / "classes.txt"),
        "--out-dir", str(out / "index2"),
    )  # fmt: skip
    assert too_few.returncode == 2
    assert (f"the data has 3 classes (the class index {out / 'classes.txt'}) but the recipe's model has num_classes 2"
            in too_few.stderr)  # fmt: skip

    # a rerun gives the same files, byte for byte
    before = {name: (out / name).read_bytes() for name in ("classes.txt", "train_labels.txt", "val_labels.txt")}
    again = kinetics(tree, out)
    assert again.returncode == 0, again.stderr
    assert {name: (out / name).read_bytes() for name in before} == before


def test_given_class_index_sets_the_indices(tree, tmp_path):
    given = tmp_path / "kinetics_classes.txt"
    given.write_text(f"zumba\n{TAIJI}\nabseiling\nbaking cookies\n", encoding="utf-8")
    done = kinetics(tree, tmp_path / "lists", "--classes", str(given))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "lists" / "classes.txt").read_bytes() == given.read_bytes()
    assert [x.rsplit(" ", 1)[1] for x in lines(tmp_path / "lists" / "train_labels.txt")] == ["2", "3", "1", "2", "1"]
    assert f"Kinetics: 4 classes (from {given})" in done.stdout


def test_class_index_lacking_a_label_names_it_and_its_line(tree, tmp_path):
    given = tmp_path / "classes.txt"
    given.write_text("abseiling\nbaking cookies\n", encoding="utf-8")
    done = kinetics(tree, tmp_path / "lists", "--classes", str(given))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"clipflow: error: {tree['train_csv']} line 4: label '{TAIJI}' is not in the class index "
        f"(from {given}, 2 classes)"
    ]
    assert not (tmp_path / "lists").exists()


def test_val_label_missing_from_the_train_labels_is_named(tree, tmp_path):
    val = tmp_path / "val.csv"
    val.write_text(VAL_CSV + "zumba,yyy,0,10,val\nyoga,zzz,0,10,val\n", encoding="utf-8")
    done = kinetics({**tree, "val_csv": val}, tmp_path / "lists")
    assert done.returncode == 2
    assert (
        f"{val} line 5: label 'zumba' is not in the class index (the sorted labels of {tree['train_csv']}, "
        "3 classes); 1 more label(s) missing too: 'yoga'"
    ) in done.stderr


@pytest.mark.parametrize(
    "which, text, message",
    [
        ("train_csv", "label,youtube_id,time_start,split\nx,a,1,train\n", "line 1: header lacks column(s) time_end"),
        ("val_csv", HEADER + "abseiling,a,1,11,val\nabseiling,b,1.5,11,val\n", "line 3: time_start must be a whole"),
        ("val_csv", HEADER + "abseiling,a,12,11,val\n", "line 2: time_end 11 must be after time_start 12"),
    ],
)
def test_broken_csv_names_file_and_line(tree, tmp_path, which, text, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(text, encoding="utf-8")
    done = kinetics({**tree, which: bad}, tmp_path / "lists")
    assert done.returncode == 2
    [error] = done.stderr.strip().splitlines()
    assert error.startswith(f"clipflow: error: {bad} {message}")
    assert not (tmp_path / "lists").exists()


def test_wrong_video_root_is_named(tree, tmp_path):
    (tmp_path / "empty").mkdir()
    done = kinetics({**tree, "root": tmp_path / "empty"}, tmp_path / "lists")
    assert done.returncode == 2
    assert f"none of the 5 train videos of {tree['train_csv']} is under {tmp_path / 'empty'}" in done.stderr


# -- data reencode -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """a.mp4 (96x64, 25 fps, 40 frames, with audio), sub/b.mkv (64x96 portrait, 30 fps, 30 frames), a text file
    posing as a video, and a list naming these and a missing video."""
    root = tmp_path_factory.mktemp("sources")
    write_counter_video(root / "a.mp4", 96, 64, frames=40, fps=25)
    (root / "sub").mkdir()
    write_counter_video(root / "sub" / "b.mkv", 64, 96, frames=30, fps=30)
    (root / "broken.mp4").write_text("not a video\n")
    (root / "list.txt").write_text("a.mp4 0\nsub/b.mkv 50 1\nbroken.mp4 1\nmissing.mp4 0\n")
    return root


def reencode(sources: Path, out: Path, *extra: str, lists: tuple[str, ...] = ("list.txt",)):
    args = [arg for name in lists for arg in ("--list", str(sources / name))]
    return clipflow("data", "reencode", *args, "--root", str(sources), "--out-root", str(out), *extra, timeout=300)


def video_facts(path: Path) -> tuple[int, int, float, int, list[int], int]:
    """(width, height, fps, frames, indices of the keyframes, number of audio streams), read with PyAV."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        facts = stream.width, stream.height, float(stream.average_rate), len(frames)
        return *facts, [i for i, f in enumerate(frames) if f.key_frame], len(container.streams.audio)


def test_reencode_sizes_rate_keyframes_then_skips_everything(sources, tmp_path):
    out = tmp_path / "out"
    done = reencode(sources, out, "--short-side", "48", "--fps", "30", "--gop", "16", "--workers", "2",
                    "--out-list", str(tmp_path / "out.txt"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{sources / 'list.txt'}: 2 re-encoded, 0 skipped" in done.stdout and "2 failed, of 4" in done.stdout
    assert f"failed: broken.mp4 ({sources / 'list.txt'} line 3): {NOT_A_CONTAINER}" in done.stdout
    assert f"failed: missing.mp4 ({sources / 'list.txt'} line 4): file not found" in done.stdout

    # a: 1.6 s at 25 fps -> 48 frames at 30; b: 1 s at 30 fps -> 30 frames, portrait; keyframes every 16; no audio
    assert video_facts(out / "a.mp4") == (72, 48, 30.0, 48, [0, 16, 32], 0)
    assert video_facts(out / "sub" / "b.mp4") == (48, 72, 30.0, 30, [0, 16], 0)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a.mp4",
        JOURNAL,
        "sub/b.mp4",
    ]
    # every entry stays in the output list (in the output tree's names), so the scan lists the failures too
    assert lines(tmp_path / "out.txt") == ["a.mp4 0", "sub/b.mp4 1", "broken.mp4 1", "missing.mp4 0"]

    # the rerun decodes nothing: every output is up to date in the journal, and no file is written again
    outputs = [out / "a.mp4", out / "sub" / "b.mp4"]
    stamps, journal = [p.stat().st_mtime_ns for p in outputs], (out / JOURNAL).read_text()
    records = [json.loads(x) for x in journal.splitlines()]
    assert sorted(r["dst"] for r in records if "error" not in r) == ["a.mp4", "sub/b.mp4"]
    assert {r["dst"]: r["error"] for r in records if "error" in r} == {"broken.mp4": NOT_A_CONTAINER,
                                                                      "missing.mp4": "file not found"}  # fmt: skip
    again = reencode(sources, out, "--short-side", "48", "--fps", "30", "--gop", "16", "--workers", "2")
    assert again.returncode == 0, again.stderr
    assert "0 re-encoded, 2 skipped" in again.stdout and "2 failed, of 4" in again.stdout
    assert [p.stat().st_mtime_ns for p in outputs] == stamps
    assert (out / JOURNAL).read_text() == journal

    # other settings make new outputs
    other = reencode(sources, out, "--short-side", "32", "--workers", "2")
    assert other.returncode == 0 and "2 re-encoded, 0 skipped" in other.stdout
    assert video_facts(out / "a.mp4")[:2] == (48, 32)


def test_reencode_fixed_size_low_rate_short_gop(sources, tmp_path):
    done = reencode(sources, tmp_path / "out", "--size", "80x64", "--fps", "10", "--gop", "4", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert video_facts(tmp_path / "out" / "a.mp4") == (80, 64, 10.0, 16, [0, 4, 8, 12], 0)
    assert video_facts(tmp_path / "out" / "sub" / "b.mp4") == (80, 64, 10.0, 10, [0, 4, 8], 0)


def test_reencode_fails_only_when_nothing_could_be_reencoded(sources, tmp_path):
    (sources / "bad.txt").write_text("broken.mp4 1\nmissing.mp4 0\n")
    done = reencode(sources, tmp_path / "out", lists=("list.txt", "bad.txt"))
    assert done.returncode == 2
    assert "failed: missing.mp4" in done.stdout
    assert done.stderr.strip().splitlines() == [
        f"clipflow: error: no video of {sources / 'bad.txt'} could be re-encoded; see the failures above"
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--size", "341x256"), "reencode width must be a positive even integer, got 341"),
        (("--short-side", "255"), "reencode short_side must be a positive even integer"),
        (("--fps", "0"), "reencode fps must be a positive number"),
        (("--out-list", "a", "--out-list", "b"), "give one --out-list per --list: 1 lists, 2 out lists"),
    ],
)
def test_reencode_bad_settings_are_named(sources, tmp_path, extra, message):
    done = reencode(sources, tmp_path / "out", *extra)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out").exists()
