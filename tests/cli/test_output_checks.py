"""Output paths checked before any work, as a user would get them wrong (issue 17): `clipflow report --out-dir`,
`data scan --out-dir`, `data reencode --out-root/--out-list`, `train launch` (its log, checkpoint, model, metrics and
TensorBoard paths) refuse a path they cannot write or whose files they would replace without having made them,
with one line naming it, and leave every file as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import assert_refused, clipflow, clipflow_here, free_port, python_env
from safety_helpers import listing

from clipflow.report.page import OWN_FILES, TITLE, check_out_dir


def report(out_dir: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`clipflow report` with inputs that do not exist: the output check comes first, so they are never read."""
    args = ["report", "--metrics", "m.json", "--history", "h.jsonl", "--manifest", "x.json", "--plan", "p.json"]
    return subprocess.run([sys.executable, "-m", "clipflow", *args, "--out-dir", str(out_dir)], env=python_env(),
                          capture_output=True, text=True, timeout=120, cwd=cwd)  # fmt: skip


def a_run(folder: Path) -> Path:
    """A folder shaped like results/<run>: what `report --out-dir` must never write into."""
    for name in ("metrics.json", "cluster/plan.json", "splits/worker0.lst", "report/report.html"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"{name}\n")
    return folder


def test_report_refuses_a_run_folder_the_working_folder_a_file_and_a_page_not_its_own(tmp_path):
    run = a_run(tmp_path / "results" / "run1")
    (tmp_path / "file.txt").write_text("mine\n")
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "report.html").write_text("<!doctype html><title>my own page</title>\n")
    before = listing(tmp_path)
    assert_refused(report(run), f"--out-dir {run} holds files that are not the report's (cluster, metrics.json, "
                   f"report and 1 more)", f"--out-dir {run / 'report'}", "nothing was changed")  # fmt: skip
    assert_refused(report(".", cwd=run), "--out-dir . holds files that are not the report's")
    assert_refused(report(tmp_path / "file.txt"), f"--out-dir {tmp_path / 'file.txt'} is a file, not a folder")
    assert_refused(report(tmp_path / "file.txt" / "r"), f"{tmp_path / 'file.txt'} is a file, so the folder")
    assert_refused(report(tmp_path / "pages"), f"{tmp_path / 'pages' / 'report.html'} is not a page clipflow "
                   "report wrote", "nothing was changed")  # fmt: skip
    assert listing(tmp_path) == before


def test_report_takes_a_new_folder_or_one_holding_only_its_own_report(tmp_path):
    own = tmp_path / "report"
    own.mkdir()
    (own / "report.html").write_text(f'<!doctype html><html><head><meta charset="utf-8"><title>{TITLE}x: y</title>\n')
    for name in OWN_FILES[1:]:
        (own / name).write_bytes(b"\x89PNG")
    assert check_out_dir(own) == own
    assert check_out_dir(tmp_path / "new" / "report") == tmp_path / "new" / "report"
    assert not (tmp_path / "new").exists()  # checked, not made: a refused command leaves no folder either


def test_scan_refuses_an_out_dir_whose_index_would_replace_the_lists_it_reads(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "train.lst").write_text("videos/a.mp4 0\n")
    (lists / "val.lst").write_text("videos/b.mp4 1\n")
    before = listing(tmp_path)
    args = ["data", "scan", "--train-list", str(lists / "train.lst"), "--val-list", str(lists / "val.lst"),
            "--root", str(tmp_path), "--num-classes", "2", "--out-dir"]  # fmt: skip
    assert_refused(clipflow(*args, str(lists)), f"--out-dir {lists}: the index {lists / 'train.lst'} would replace "
                   f"the train list being scanned ({lists / 'train.lst'})", "nothing was changed")  # fmt: skip
    assert_refused(clipflow(*args, str(lists / "val.lst")), f"--out-dir {lists / 'val.lst'} is a file, not a folder")
    assert listing(tmp_path) == before


def test_reencode_refuses_to_replace_files_it_did_not_make_or_the_list_it_reads(tmp_path):
    root = tmp_path / "videos"
    root.mkdir()
    (root / "list.txt").write_text("a.avi 0\nsub/b.mkv 1\n")
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    (theirs / "sub" / "b.mp4").write_text("someone's own video\n")  # where sub/b.mkv's output would go
    before = listing(tmp_path)

    def reencode(*extra: str) -> subprocess.CompletedProcess:
        return clipflow("data", "reencode", "--list", str(root / "list.txt"), "--root", str(root), *extra)

    assert_refused(reencode("--out-root", str(theirs)), f"--out-root {theirs} holds 1 file(s) where outputs would go "
                   f"(e.g. {theirs / 'sub' / 'b.mp4'}) and no reencode.jsonl", "nothing was changed")  # fmt: skip
    assert_refused(reencode("--out-root", str(tmp_path / "out"), "--out-list", str(root / "list.txt")),
                   f"--out-list {root / 'list.txt'} is the --list {root / 'list.txt'} being re-encoded")  # fmt: skip
    assert_refused(reencode("--out-root", str(root / "list.txt")), f"--out-root {root / 'list.txt'} is a file")
    assert_refused(reencode("--out-root", str(tmp_path / "out"), "--out-list", str(theirs)),
                   f"--out-list {theirs} is a folder, but --out-list names the file to write")  # fmt: skip
    assert listing(tmp_path) == before


def test_train_launch_refuses_its_output_paths_before_anything_starts(tmp_path, capsys):
    """The final model and metrics are written after the last epoch: a folder or a file in the wrong place there
    failed only then. Each is named before the job is written or a worker starts."""
    plan = tmp_path / "plan.json"
    made = clipflow("cluster", "plan", "--num-workers", "1", "--root-port", str(free_port()), "--out", str(plan))
    assert made.returncode == 0, made.stderr
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("mine\n")
    good = {"--log-dir": "logs", "--checkpoint-root": "ckpt", "--model-out": "model.pt", "--metrics-out": "m.jsonl"}
    cases = {
        ("--model-out", "folder"): f"--model-out {tmp_path / 'folder'} is a folder, but --model-out names the file "
                                   f"to write: give a file path (e.g. --model-out {tmp_path / 'folder' / 'model.pt'})",
        ("--metrics-out", "file/m.jsonl"): f"--metrics-out {tmp_path / 'file' / 'm.jsonl'}: {tmp_path / 'file'} is "
                                           "a file, so the folder",
        ("--checkpoint-root", "file"): f"--checkpoint-root {tmp_path / 'file'} is a file, not a folder",
        ("--log-dir", "file"): f"--log-dir {tmp_path / 'file'} is a file, not a folder",
        ("--tensorboard", "file"): f"--tensorboard {tmp_path / 'file'} is a file, not a folder",
    }  # fmt: skip
    before = listing(tmp_path)
    for (flag, bad), message in cases.items():
        paths = {**good, flag: bad}
        args = [arg for name, path in paths.items() for arg in (name, str(tmp_path / path))]
        done = clipflow_here(capsys, "train", "launch", "--plan", str(plan), "--recipe", "slowfast_tiny_synthetic",
                             "--splits-dir", str(tmp_path / "splits"), "--root", str(tmp_path), *args)  # fmt: skip
        assert_refused(done, message)
        assert listing(tmp_path) == before, flag  # no job.json, no log folder
