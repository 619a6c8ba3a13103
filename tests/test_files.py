"""clipflow.files: an atomic write leaves the old file or the new one and nothing else, whatever fails, and never
touches a file that was there before; the output checks refuse a folder for a file, a file for a folder and a path
whose folder cannot be made, naming the flag and the path, and make nothing. On a full disk (a small tmpfs) a write
and a journal's append fail in one line naming the file, the bytes needed and the bytes free, and leave the old
contents and nothing else (issue 30)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from disk_helpers import PAGE, files_on, fill, full_message
from safety_helpers import listing

from clipflow.errors import ClipflowError
from clipflow.files import DiskFull, check_output_dir, check_output_file, write_text_atomic
from clipflow.jsonl import append_record


def test_an_atomic_write_replaces_the_file_and_leaves_nothing_else(tmp_path):
    (tmp_path / "out.json.tmp").write_text("someone's own\n")  # the name the old temporary file had
    write_text_atomic(tmp_path / "out.json", "old\n")
    write_text_atomic(tmp_path / "out.json", "new\n")
    assert (tmp_path / "out.json").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.tmp"]
    assert (tmp_path / "out.json.tmp").read_text() == "someone's own\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o666 & ~umask  # as a plain write's


@pytest.mark.parametrize(
    "fail",
    [
        pytest.param(lambda path: write_text_atomic(path, "\ud800"), id="unencodable-text"),
        pytest.param(lambda path: write_text_atomic(path.parent / "folder", "x"), id="target-is-a-folder"),
    ],
)
def test_a_failed_atomic_write_leaves_the_old_file_and_no_tmp(tmp_path, fail):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "inside.txt").write_text("kept\n")
    write_text_atomic(tmp_path / "out.json", "old\n")
    before = listing(tmp_path)
    with pytest.raises((UnicodeEncodeError, IsADirectoryError)):
        fail(tmp_path / "out.json")
    assert listing(tmp_path) == before


def test_an_interrupted_atomic_write_leaves_no_tmp(tmp_path, monkeypatch):
    write_text_atomic(tmp_path / "out.json", "old\n")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(tmp_path / "out.json", "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert (tmp_path / "out.json").read_text() == "old\n"


def test_an_output_file_that_is_a_folder_or_under_a_file_is_refused(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("mine\n")
    before = listing(tmp_path)
    cases = {
        str(tmp_path / "folder"): f"--out {tmp_path / 'folder'} is a folder, but --out names the file to write: give "
        f"a file path (e.g. --out {tmp_path / 'folder' / 'metrics.json'})",
        f"{tmp_path / 'missing'}/": f"--out {tmp_path / 'missing'}/ is a folder",
        str(tmp_path / "file" / "deeper" / "m.json"): f"--out {tmp_path / 'file' / 'deeper' / 'm.json'}: "
        f"{tmp_path / 'file'} is a file, so the folder {tmp_path / 'file' / 'deeper'} cannot be made",
    }
    for path, message in cases.items():
        with pytest.raises(ClipflowError) as refused:
            check_output_file(path, "--out", "metrics.json")
        assert str(refused.value).startswith(message), str(refused.value)
    assert check_output_file(tmp_path / "a" / "b" / "m.json", "--out") == tmp_path / "a" / "b" / "m.json"
    assert listing(tmp_path) == before  # a check makes nothing


def test_an_output_folder_that_is_a_file_or_under_one_is_refused(tmp_path):
    (tmp_path / "file").write_text("mine\n")
    before = listing(tmp_path)
    with pytest.raises(ClipflowError, match=f"^--out-dir {tmp_path / 'file'} is a file, not a folder"):
        check_output_dir(tmp_path / "file", "--out-dir")
    with pytest.raises(ClipflowError, match=f"^--out-dir {tmp_path / 'file' / 'x'}: {tmp_path / 'file'} is a file"):
        check_output_dir(tmp_path / "file" / "x", "--out-dir")
    assert check_output_dir(tmp_path / "new" / "deeper", "--out-dir") == tmp_path / "new" / "deeper"
    assert listing(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_an_output_folder_without_write_permission_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(ClipflowError, match=f"no permission to make the folder {locked / 'x'} in {locked}"):
            check_output_dir(locked / "x", "--out-dir")
        with pytest.raises(ClipflowError, match=f"no permission to write in the folder {locked}"):
            check_output_file(locked / "m.json", "--out")
    finally:
        locked.chmod(0o700)


def test_a_write_on_a_full_disk_names_the_file_the_bytes_needed_and_free_and_keeps_the_old_file(small_disk):
    out = small_disk / "out.json"
    write_text_atomic(out, "old\n")
    free = fill(small_disk, PAGE)
    with pytest.raises(DiskFull) as failed:
        write_text_atomic(out, "x" * (PAGE + 1))  # one page more than is free
    assert str(failed.value) == full_message(out, PAGE + 1, free)
    assert files_on(small_disk) == ["out.json"] and out.read_text() == "old\n"


def test_a_journal_append_on_a_full_disk_leaves_its_lines_whole(small_disk):
    journal = small_disk / "scan.jsonl"
    journal.write_text('{"n": 1}\n')
    free = fill(small_disk, 0)
    record = {"n": 2, "text": "y" * PAGE}  # more than the rest of the journal's page
    with journal.open("a", encoding="utf-8") as log, pytest.raises(DiskFull) as failed:
        append_record(log, record)
    assert str(failed.value) == full_message(journal, len(json.dumps(record)) + 1, free)
    assert journal.read_text() == '{"n": 1}\n'  # the part written is cut off again: the next line starts clean
