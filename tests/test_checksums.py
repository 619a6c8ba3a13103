"""clipflow.checksums: a file and its ``.sha256`` are written whole under temporary names and renamed together, so a
full disk (a small tmpfs) leaves the old pair, never a file without its checksum (issue 30: metrics.json was left
without one)."""

from __future__ import annotations

import hashlib

import pytest
from disk_helpers import PAGE, files_on, fill, full_message

from clipflow.checksums import write_text_with_checksum
from clipflow.files import DiskFull


def test_a_file_whose_checksum_finds_the_disk_full_is_not_put_in_place(small_disk):
    out = small_disk / "metrics.json"
    write_text_with_checksum(out, "old\n")
    old = (out.read_text(), (small_disk / "metrics.json.sha256").read_text())
    free = fill(small_disk, PAGE)  # room for the new file, none for its checksum
    with pytest.raises(DiskFull) as failed:
        write_text_with_checksum(out, "new\n")
    line = hashlib.sha256(b"new\n").hexdigest() + "  metrics.json\n"
    assert str(failed.value) == full_message(f"{out}.sha256", len(line), free)
    assert files_on(small_disk) == ["metrics.json", "metrics.json.sha256"]
    assert (out.read_text(), (small_disk / "metrics.json.sha256").read_text()) == old
