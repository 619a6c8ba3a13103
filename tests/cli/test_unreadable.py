"""Files a command may not read (mode 000) and folders it may not write in (mode 555), each named in one line
that says so, with no traceback: a list file, a hosts file, a job file, a video (left out by the scan and the
re-encode with its reason), a run's run.json, metrics.jsonl and run folder (``clipflow status``), and the
output folder of ``data scan`` and ``evaluate``. The commands run held to file modes (see
bad_input_helpers.bound_by_modes), as the tests may run as root."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bad_input_helpers import clipflow_bound, decoder_text_in
from helpers import assert_refused

from clipflow.data.synthetic import write_video

DENIED = "cannot be read: permission denied (check its mode and owner)"
FACTS = {"recipe": "r", "epochs": 4, "iters_per_epoch": 2, "workers": 1, "global_batch": 4, "backend": "ps"}
EPOCH = {"epoch": 1, "epoch_time": 3.0, "clips_per_s": 2.0, "loss": 1.0, "lr": 0.1, "data_time": 0.1,
         "step_time": 0.2}  # fmt: skip


def locked(path: Path, mode: int = 0) -> Path:
    path.chmod(mode)
    return path


def scan(tmp_path: Path, train: Path, root: Path | None = None, out: Path | None = None) -> list[str]:
    """``data scan`` of ``train`` and a good one-line val list, into ``out`` (default tmp_path/index)."""
    val = tmp_path / "val.txt"
    val.write_text("good.mp4 0\n")
    return ["data", "scan", "--train-list", str(train), "--val-list", str(val), "--root", str(root or tmp_path),
            "--num-classes", "2", "--out-dir", str(out or tmp_path / "index"), "--workers", "1"]  # fmt: skip


def a_run(tmp_path: Path) -> Path:
    """A run folder whose run.json and metrics.jsonl are good; ``clipflow status`` reads it as run "tiny"."""
    folder = tmp_path / "results" / "tiny" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(FACTS))
    (folder / "metrics.jsonl").write_text(json.dumps(EPOCH) + "\n")
    return folder


def status(tmp_path: Path):
    return clipflow_bound("status", "--results", str(tmp_path / "results"), "tiny")


@pytest.fixture
def videos(tmp_path: Path) -> Path:
    """A folder with good.mp4 (24 frames) and a copy of it no one may read, secret.mp4."""
    root = tmp_path / "videos"
    root.mkdir()
    frames = np.random.default_rng(5).integers(0, 255, (24, 48, 64, 3), dtype=np.uint8)
    write_video(root / "good.mp4", frames, 25, 8)
    (root / "secret.mp4").write_bytes((root / "good.mp4").read_bytes())
    locked(root / "secret.mp4")
    return root


def test_an_unreadable_list_file_is_named(tmp_path: Path) -> None:
    train = tmp_path / "train.txt"
    train.write_text("good.mp4 0\n")
    assert_refused(clipflow_bound(*scan(tmp_path, locked(train))), f"list file {train} {DENIED}")


def test_an_unreadable_hosts_file_is_named(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n")
    done = clipflow_bound("cluster", "plan", "--hosts-file", str(locked(hosts)), "--out", str(tmp_path / "p.json"))
    assert_refused(done, f"hosts file {hosts} {DENIED}")
    assert not (tmp_path / "p.json").exists()


def test_an_unreadable_job_file_is_named(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text("{}")
    done = clipflow_bound("train", "launch", "--job", str(locked(job)), "--log-dir", str(tmp_path / "logs"))
    assert_refused(done, f"job file {job} {DENIED}", "`clipflow train launch` writes a good one")


def test_scan_leaves_out_an_unreadable_video_with_its_reason(tmp_path: Path, videos: Path) -> None:
    train = tmp_path / "train.txt"
    train.write_text("good.mp4 0\nsecret.mp4 1\n")
    done = clipflow_bound(*scan(tmp_path, train, videos))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"left out (train): secret.mp4 (line 2): {DENIED}\n" in done.stdout, done.stdout
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert [(f["path"], f["error"]) for f in manifest["failures"]] == [("secret.mp4", DENIED)]
    assert decoder_text_in(done.stdout + done.stderr) == [] and "Traceback" not in done.stderr


def test_reencode_names_an_unreadable_video_with_its_reason(tmp_path: Path, videos: Path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_text("good.mp4 0\nsecret.mp4 1\n")
    done = clipflow_bound("data", "reencode", "--list", str(listed), "--root", str(videos), "--out-root",
                          str(tmp_path / "out"), "--short-side", "32", "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"failed: secret.mp4 ({listed} line 2): {DENIED}\n" in done.stdout, done.stdout
    assert decoder_text_in(done.stdout + done.stderr) == [] and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl"])
def test_status_names_an_unreadable_run_file(tmp_path: Path, name: str) -> None:
    folder = a_run(tmp_path)
    locked(folder / name)
    assert_refused(status(tmp_path), f"{folder / name} {DENIED}")


def test_status_names_a_run_folder_it_may_not_look_into(tmp_path: Path) -> None:
    folder = locked(a_run(tmp_path))
    try:
        assert_refused(status(tmp_path), DENIED, str(folder))
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("made", [False, True], ids=["in-it", "under-it"])
def test_scan_refuses_an_output_folder_it_may_not_write_in(tmp_path: Path, made: bool) -> None:
    train = tmp_path / "train.txt"
    train.write_text("good.mp4 0\n")
    readonly = tmp_path / "readonly"
    readonly.mkdir(mode=0o555)
    out = readonly / "index" if made else readonly
    try:
        done = clipflow_bound(*scan(tmp_path, train, out=out))
        where = f"make the folder {out} in {readonly}" if made else f"write in the folder {out}"
        assert_refused(done, f"--out-dir {out}: no permission to {where}; name a folder you can write in")
    finally:
        readonly.chmod(0o755)
    assert list(readonly.iterdir()) == []


def test_evaluate_refuses_an_output_file_in_a_folder_it_may_not_write_in(tmp_path: Path) -> None:
    readonly = tmp_path / "readonly"
    readonly.mkdir(mode=0o555)
    out = readonly / "metrics.json"
    listed = tmp_path / "val.txt"
    listed.write_text("good.mp4 0\n")
    try:
        done = clipflow_bound("evaluate", "--model", str(tmp_path / "model.pt"), "--list", str(listed), "--root",
                              str(tmp_path), "--out", str(out))  # fmt: skip
        assert_refused(done, f"--out {out}: no permission to write in the folder {readonly}")
    finally:
        readonly.chmod(0o755)
    assert not out.exists()
