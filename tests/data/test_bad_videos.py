"""Videos that no decoder can read, named in the user's words wherever they are read: the frame reader (both
decoders), the training dataset, ``data scan`` and ``data reencode``. An audio-only file is "no video stream",
a folder is "a folder, not a video file", never a decoder's own check text or its bare "Error reading"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bad_input_helpers import bad_videos, decoder_text_in
from helpers import clipflow

from clipflow.data.build import build_dataset
from clipflow.data.reader import read_frames
from clipflow.data.reencode import ReencodeSpec, reencode_lists
from clipflow.data.scan import scan_lists
from clipflow.data.synthetic import write_video
from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe

FRAMES = 24


@pytest.fixture(scope="module")
def video_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A folder with one good video (good.mp4, 24 frames) and the bad ones of bad_videos, with their reasons."""
    root = tmp_path_factory.mktemp("videos")
    rng = np.random.default_rng(3)
    write_video(root / "good.mp4", rng.integers(0, 255, (FRAMES, 48, 64, 3), dtype=np.uint8), 25, 8)
    return root, bad_videos(root, root / "good.mp4")


@pytest.mark.parametrize("decoder", ["pyav", "decord"])
def test_the_frame_reader_gives_each_bad_videos_reason(video_root, decoder: str) -> None:
    root, reasons = video_root
    for name, reason in reasons.items():
        with pytest.raises(ClipflowError) as error:
            read_frames(root / name, [0, 1], 32, 32, decoder)
        assert str(error.value) == reason, (name, decoder)
        assert decoder_text_in(str(error.value)) == []


def test_the_training_dataset_names_the_video_its_list_line_and_the_reason(video_root, tmp_path: Path) -> None:
    root, reasons = video_root
    listed = tmp_path / "val.lst"
    listed.write_text(f"good.mp4 {FRAMES} 0\nsound.mp4 {FRAMES} 1\nfolder.mp4 {FRAMES} 1\n")
    dataset = build_dataset(load_recipe("slowfast_tiny_synthetic"), listed, root, "val", 0)
    assert dataset[0][2] == 0  # the good one reads
    for index, name in ((1, "sound.mp4"), (2, "folder.mp4")):
        with pytest.raises(ClipflowError) as error:
            dataset[index]
        assert str(error.value) == f"cannot decode {root / name} (listed in {listed} line {index + 1}): {reasons[name]}"


def test_scan_leaves_out_each_bad_video_with_its_reason(video_root, tmp_path: Path) -> None:
    root, reasons = video_root
    names = list(reasons)
    (tmp_path / "train.txt").write_text("good.mp4 0\n" + "".join(f"{name} 1\n" for name in names))
    (tmp_path / "val.txt").write_text("good.mp4 0\n")
    done = clipflow("data", "scan", "--train-list", str(tmp_path / "train.txt"), "--val-list",
                    str(tmp_path / "val.txt"), "--root", str(root), "--num-classes", "2", "--out-dir",
                    str(tmp_path / "index"), "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    for line, name in enumerate(names, start=2):
        assert f"left out (train): {name} (line {line}): {reasons[name]}\n" in done.stdout, name
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert {f["path"]: f["error"] for f in manifest["failures"]} == reasons
    assert decoder_text_in(done.stdout + done.stderr) == [] and "Traceback" not in done.stderr


def test_reencode_names_each_bad_video_with_its_reason(video_root, tmp_path: Path) -> None:
    root, reasons = video_root
    names = list(reasons)
    listed = tmp_path / "list.txt"
    listed.write_text("good.mp4 0\n" + "".join(f"{name} 0\n" for name in names))
    done = clipflow("data", "reencode", "--list", str(listed), "--root", str(root), "--out-root",
                    str(tmp_path / "out"), "--short-side", "32", "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1 re-encoded, 0 skipped" in done.stdout and f"{len(names)} failed, of {len(names) + 1}" in done.stdout
    for line, name in enumerate(names, start=2):
        assert f"failed: {name} ({listed} line {line}): {reasons[name]}\n" in done.stdout, name
    assert decoder_text_in(done.stdout + done.stderr) == [] and "Traceback" not in done.stderr


def test_the_scan_of_a_reencoded_tree_gives_each_left_out_videos_own_reason(video_root, tmp_path: Path) -> None:
    """The re-encode's list of outputs keeps the videos it could not make, so that the scan lists them too: with the
    reason the re-encode found, not "file not found" about an output that was never made."""
    root, reasons = video_root
    listed = tmp_path / "list.txt"
    listed.write_text("good.mp4 0\n" + "".join(f"{name} 0\n" for name in reasons))
    reencode_lists([listed], root, tmp_path / "out", ReencodeSpec(short_side=32), [tmp_path / "out.txt"],
                   workers=1, log=lambda line: None)  # fmt: skip
    scan_lists(tmp_path / "out.txt", tmp_path / "out.txt", tmp_path / "out", 2, None, tmp_path / "index", 1,
               log=lambda line: None)  # fmt: skip
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    left_out = {f["path"]: f["error"] for f in manifest["failures"] if f["split"] == "train"}
    outputs = {name: str(Path(name).with_suffix(".mp4")) for name in reasons if not Path(name).is_absolute()}
    assert left_out == {outputs[name]: f"re-encoding failed: {reasons[name]}" for name in outputs}


def test_a_video_replaced_after_the_scan_is_named_as_changed_not_out_of_range(video_root, tmp_path: Path) -> None:
    """The index says 24 frames; the file now holds 6 (replaced by a shorter cut). A clip past frame 6 cannot be
    read, and the loader says the video changed since the scan, not "frame 12 is out of range"."""
    root, _ = video_root
    (tmp_path / "short.mp4").write_bytes((root / "good.mp4").read_bytes())
    listed = tmp_path / "val.lst"
    listed.write_text(f"short.mp4 {FRAMES} 0\n")
    dataset = build_dataset(load_recipe("slowfast_tiny_synthetic"), listed, tmp_path, "val", 0)
    assert dataset[0][2] == 0  # as scanned, it reads
    write_video(tmp_path / "short.mp4", np.zeros((6, 48, 64, 3), np.uint8), 25, 8)
    with pytest.raises(ClipflowError) as error:
        dataset[0]
    assert str(error.value) == (
        f"{tmp_path / 'short.mp4'} (listed in {listed} line 1) changed since the scan: the index lists {FRAMES} "
        "frames, the file now holds 6; rerun the workflow (a changed video reruns the data stage) or "
        "`snakemake --forcerun data_scan`"
    )
