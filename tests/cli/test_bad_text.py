"""Text and JSON inputs a command cannot read, each one line naming the file (and the line) and no traceback:
a byte that is not UTF-8 in a list file, a PySlowFast CSV, a hosts file, a Kinetics CSV, a class index, a run's
run.json and metrics.jsonl (``clipflow status``) and the report's inputs; JSON that is not an object; a folder
where a file should be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_helpers import LATIN1_E
from helpers import assert_refused, clipflow
from kinetics_helpers import HEADER

NOT_UTF8 = f"byte 0x{LATIN1_E[0]:02x} at column 2 is not UTF-8 text"
FACTS = {"recipe": "r", "epochs": 4, "iters_per_epoch": 2, "workers": 1, "global_batch": 4, "backend": "ps"}
EPOCH = {"epoch": 1, "epoch_time": 3.0, "clips_per_s": 2.0, "loss": 1.0, "lr": 0.1, "data_time": 0.1,
         "step_time": 0.2}  # fmt: skip


def scan_args(tmp_path: Path, train: Path, val: Path | None = None, *more: str) -> list[str]:
    """``data scan`` of ``train`` (and ``val``, default a good one-line list) with 2 classes."""
    if val is None:
        val = tmp_path / "val.txt"
        val.write_text("v.mp4 0\n")
    return ["data", "scan", "--train-list", str(train), "--val-list", str(val), "--root", str(tmp_path),
            "--num-classes", "2", "--out-dir", str(tmp_path / "index"), *more]  # fmt: skip


def a_run(tmp_path: Path, facts: bytes | None = None, metrics: bytes | None = None) -> list[str]:
    """``clipflow status`` of a run whose run.json and metrics.jsonl hold the given bytes (else good ones)."""
    folder = tmp_path / "results" / "tiny" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "run.json").write_bytes(facts if facts is not None else json.dumps(FACTS).encode())
    (folder / "metrics.jsonl").write_bytes(metrics if metrics is not None else json.dumps(EPOCH).encode() + b"\n")
    return ["status", "--results", str(tmp_path / "results"), "tiny"]


def report_args(tmp_path: Path, **files: bytes) -> list[str]:
    """``clipflow report`` of inputs that hold the given bytes (metrics, history, manifest, plan), else good ones
    as far as the page reads them before the bad one."""
    good = {
        "metrics": json.dumps({"recipe": "r", "top1": 0.5, "top5": 0.9, "num_videos": 2}).encode(),
        "history": json.dumps(EPOCH).encode() + b"\n",
        "manifest": json.dumps({"splits": {}, "failures": []}).encode(),
        "plan": json.dumps({"roles": []}).encode(),
    }
    args = ["report", "--out-dir", str(tmp_path / "report")]
    for name, data in {**good, **files}.items():
        (tmp_path / f"{name}.json").write_bytes(data)
        args += [f"--{name}", str(tmp_path / f"{name}.json")]
    return args


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def not_utf8_cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Per reader: the command that reads a file with a Latin-1 "é" on its second line, and that file."""
    e = LATIN1_E
    listed = write(tmp_path / "train.txt", b"a.mp4 0\nb" + e + b".mp4 1\n")
    slowfast = write(tmp_path / "train.csv", b"a.mp4,0\nb" + e + b".mp4,1\n")
    hosts = write(tmp_path / "hosts", b"localhost slots=1\nh" + e + b"st\n")
    kinetics = write(tmp_path / "kinetics.csv", HEADER.encode() + b"t" + e + b"iji,aaa,0,10,train\n")
    classes = write(tmp_path / "classes.txt", b"abseiling\nt" + e + b"iji\n")
    good_csv = write(tmp_path / "good.csv", (HEADER + "abseiling,aaa,0,10,train\n").encode())
    kinetics_args = ["data", "kinetics", "--val-csv", str(good_csv), "--root", str(tmp_path), "--out-dir",
                     str(tmp_path / "lists")]  # fmt: skip
    return {
        "list file": (scan_args(tmp_path, listed), f"list file {listed} line 2"),
        "PySlowFast CSV": (scan_args(tmp_path, slowfast), f"list file {slowfast} line 2"),
        "val list": (scan_args(tmp_path, write(tmp_path / "t.txt", b"a.mp4 0\n"), listed), f"{listed} line 2"),
        "hosts file": (["launch", "-n", "1", "-H", str(hosts), "--", "true"], f"hosts file {hosts} line 2"),
        "Kinetics CSV": ([*kinetics_args, "--train-csv", str(kinetics)], f"annotation file {kinetics} line 2"),
        "class index (kinetics)": (
            [*kinetics_args, "--train-csv", str(good_csv), "--classes", str(classes)],
            f"class-index file {classes} line 2",
        ),  # fmt: skip
        "class index (scan)": (
            scan_args(tmp_path, write(tmp_path / "t.txt", b"a.mp4 0\n"), None, "--classes", str(classes)),
            f"class-index file {classes} line 2",
        ),  # fmt: skip
    }


NOT_UTF8_READERS = ["list file", "PySlowFast CSV", "val list", "hosts file", "Kinetics CSV", "class index (kinetics)",
                    "class index (scan)"]  # fmt: skip


@pytest.mark.parametrize("reader", NOT_UTF8_READERS)
def test_a_byte_that_is_not_utf8_is_named_with_its_file_and_line(tmp_path: Path, reader: str) -> None:
    args, where = not_utf8_cases(tmp_path)[reader]
    line = assert_refused(clipflow(*args), where, NOT_UTF8)
    assert "UTF-8" in line and "iconv" in line  # the way out


def test_status_names_a_run_json_that_is_json_but_not_an_object(tmp_path: Path) -> None:
    done = clipflow(*a_run(tmp_path, facts=b"[1, 2]\n"))
    assert_refused(done, "run.json is JSON but not an object (it holds a list)", "rerun the train stage")


def test_status_names_a_run_json_that_is_not_utf8(tmp_path: Path) -> None:
    done = clipflow(*a_run(tmp_path, facts=b'{"recipe": "t' + LATIN1_E + b'", "epochs": 4}'))
    assert_refused(done, "run.json line 1: byte 0xe9 at column 14 is not UTF-8 text")


def test_status_names_a_metrics_line_that_is_not_utf8(tmp_path: Path) -> None:
    metrics = json.dumps(EPOCH).encode() + b'\n{"note": "' + LATIN1_E + b'"}\n'
    assert_refused(clipflow(*a_run(tmp_path, metrics=metrics)), "metrics.jsonl line 2: byte 0xe9", "not UTF-8")


def test_status_names_a_metrics_line_that_is_not_an_object(tmp_path: Path) -> None:
    metrics = json.dumps(EPOCH).encode() + b"\n[1, 2]\n"
    assert_refused(clipflow(*a_run(tmp_path, metrics=metrics)), "metrics.jsonl line 2 is JSON but not an object")


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("metrics", b'"top1"', "metrics file {path} is JSON but not an object (it holds a string)"),
        ("metrics", b'{"recipe": "' + LATIN1_E + b'"}', "metrics file {path} line 1: byte 0xe9 at column 13"),
        ("history", json.dumps(EPOCH).encode() + b"\n" + LATIN1_E + b"\n", "training history {path} line 2: byte"),
        ("history", b"null\n", "training history {path} line 1 is JSON but not an object (it holds null)"),
        ("manifest", b"[]", "dataset manifest {path} is JSON but not an object (it holds a list)"),
        ("plan", b"{\n" + LATIN1_E, "cluster plan {path} line 2: byte 0xe9 at column 1 is not UTF-8 text"),
    ],
)
def test_report_names_an_input_it_cannot_read(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    done = clipflow(*report_args(tmp_path, **{name: data}))
    assert_refused(done, message.format(path=tmp_path / f"{name}.json"))
    assert not (tmp_path / "report" / "report.html").exists()


def test_a_cluster_plan_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    plan = write(tmp_path / "plan.json", b'{"launcher": "local",\n "hosts": ["h' + LATIN1_E + b'"]}\n')
    done = clipflow("cluster", "check", "--plan", str(plan), "--out", str(tmp_path / "checks.json"))
    assert_refused(done, f"cluster plan {plan} line 2: byte 0xe9 at column 14 is not UTF-8 text", "rerun the cluster")
    assert not (tmp_path / "checks.json").exists()


def test_a_folder_given_as_a_list_or_class_index_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "lists"
    folder.mkdir()
    assert_refused(clipflow(*scan_args(tmp_path, folder)), f"list file {folder} is a folder, not a file")
    good = write(tmp_path / "t.txt", b"a.mp4 0\n")
    done = clipflow(*scan_args(tmp_path, good, None, "--classes", str(folder)))
    assert_refused(done, f"class-index file {folder} is a folder, not a file")
