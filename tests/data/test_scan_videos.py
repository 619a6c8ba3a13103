"""videos.json (issue 18): the scan records the size, mtime_ns and sha256 of every video it keeps, a resumed
scan takes the sha256 from its journal instead of hashing again, and the reader refuses a missing or broken
file with one line saying to rerun the data stage."""

import hashlib
import json
import os
import shutil

import pytest

from clipflow.data.scan import VideoRecord, journal_name, read_video_records, scan_lists
from clipflow.errors import ClipflowError

RERUN = "rerun the data stage (snakemake --forcerun data_scan)"


@pytest.fixture
def tree(tiny_videos, tmp_path):
    """A copy of the tiny set with a broken and a missing video in each list: (root, train list, val list)."""
    root = tmp_path / "tree"
    shutil.copytree(tiny_videos / "videos", root / "videos")
    (root / "videos" / "broken.mp4").write_text("this is not a video\n")
    lists = {}
    for split in ("train", "val"):
        text = (tiny_videos / f"{split}_labels.txt").read_text()
        lists[split] = tmp_path / f"{split}.txt"
        lists[split].write_text(text + "videos/broken.mp4 1\nvideos/missing.mp4 2\n")
    return root, lists["train"], lists["val"]


def run_scan(tree, out):
    root, train, val = tree
    return scan_lists(train, val, root, 8, None, out, workers=2, log=lambda _: None)


def kept(out):
    """Paths of train.lst and val.lst."""
    return [line.split()[0] for split in ("train", "val") for line in (out / f"{split}.lst").read_text().splitlines()]


def test_videos_json_records_every_kept_video_with_its_real_hash(tree, tmp_path):
    root = tree[0]
    out = tmp_path / "index"
    manifest = run_scan(tree, out)
    assert len(manifest["failures"]) == 4  # broken and missing, in each split

    data = json.loads((out / "videos.json").read_text())
    assert data["version"] == 1 and data["root"] == str(root)
    assert sorted(data["files"]) == sorted(kept(out)) and len(data["files"]) == 24
    for path, rec in data["files"].items():
        st = (root / path).stat()
        assert rec == {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": hashlib.sha256((root / path).read_bytes()).hexdigest(),
        }
    records = read_video_records(out)
    assert records == {p: VideoRecord(r["size"], r["mtime_ns"], r["sha256"]) for p, r in data["files"].items()}
    assert "videos/broken.mp4" not in records and "videos/missing.mp4" not in records


def test_resumed_scan_takes_the_hashes_from_its_journal(tree, tmp_path):
    out = tmp_path / "index"
    run_scan(tree, out)
    first = (out / "videos.json").read_text()
    for split in ("train", "val"):
        lines = [json.loads(line) for line in (out / journal_name(split)).read_text().splitlines()]
        assert all(len(r["sha256"]) == 64 for r in lines if r["error"] is None)
        assert all(r["sha256"] is None for r in lines if r["error"] is not None)

    from clipflow.data import scan as scan_module
    from clipflow.data.listfile import read_list

    root, train, _ = tree
    again = scan_module.scan(read_list(train, 8), root, journal=out / journal_name("train"))
    assert all(r.from_journal for r in again)  # nothing decoded, nothing hashed
    good = [r for r in again if r.error is None]
    assert all(r.sha256 == read_video_records(out)[r.path].sha256 for r in good) and len(good) == 16

    run_scan(tree, out)
    assert (out / "videos.json").read_text() == first


def test_journal_line_without_sha256_is_probed_again(tree, tmp_path):
    from clipflow.data.listfile import read_list
    from clipflow.data.scan import scan

    root, train, _ = tree
    entries = read_list(train, 8)
    journal = tmp_path / "train.scan.jsonl"
    first = scan(entries, root, journal=journal)
    old = [json.loads(line) for line in journal.read_text().splitlines()]
    for record in old[:3]:  # as the previous clipflow wrote them
        del record["sha256"]
    journal.write_text("".join(json.dumps(r) + "\n" for r in old))

    again = scan(entries, root, journal=journal)

    assert {r.path for r in again if not r.from_journal} == {r["path"] for r in old[:3]}
    assert again == first
    assert all(r.sha256 for r in again if r.error is None)


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "does not exist"),
        ("{not json", "is not JSON"),
        ("[]", "is JSON but not an object"),
        ('{"version": 2, "root": "/d", "files": {}}', "version 2 is not 1"),
        ('{"version": 1, "files": {}}', '"root" is null'),
        ('{"version": 1, "root": "/d", "files": []}', '"files" is a list, not an object'),
        ('{"version": 1, "root": "/d", "files": {"a.mp4": {"size": 1}}}', "'a.mp4' is not a record"),
        ('{"version": 1, "root": "/d", "files": {"a.mp4": {"size": -1, "mtime_ns": 1, "sha256": "ab"}}}', "size"),
        ('{"version": 1, "root": "/d", "files": {"a.mp4": {"size": 1, "mtime_ns": 1, "sha256": "ab"}}}', "64 hex"),
    ],
)
def test_missing_or_broken_videos_json_is_one_line_naming_it(tmp_path, text, message):
    if text is not None:
        (tmp_path / "videos.json").write_text(text)
    with pytest.raises(ClipflowError) as caught:
        read_video_records(tmp_path)
    said = str(caught.value)
    assert "\n" not in said and str(tmp_path / "videos.json") in said and message in said and said.endswith(RERUN)


def test_videos_json_root_is_absolute(tree, tmp_path, monkeypatch):
    root, train, val = tree
    monkeypatch.chdir(root.parent)
    scan_lists(train, val, os.path.relpath(root), 8, None, tmp_path / "index", workers=1, log=lambda _: None)
    assert json.loads((tmp_path / "index" / "videos.json").read_text())["root"] == str(root)
