"""A small disk for the full-disk tests (issue 30): a 64 KiB tmpfs mounted for one test and unmounted after it (never
left mounted; the ``small_disk`` fixture), a filler that leaves a chosen number of bytes free on it, and the one line
a full disk gives."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = 64 * 1024
PAGE = 4096  # tmpfs counts its space in pages: a file of 1 byte takes one
FILLER = "filler"


@contextlib.contextmanager
def small_tmpfs(where: Path) -> Iterator[Path]:
    """An empty 64 KiB tmpfs mounted on the new folder ``where``, unmounted when the block ends; the test is skipped,
    with the reason, where this process may not mount one (not root). The ``small_disk`` fixture (conftest.py)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "--lazy", str(where)], check=True)  # a process still holding a file there


def free_on(where: Path) -> int:
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize


def fill(where: Path, leave: int) -> int:
    """Fills ``where``'s disk with a file :data:`FILLER` until ``leave`` bytes (whole pages) are free; ``leave``."""
    assert leave % PAGE == 0, leave
    with open(where / FILLER, "ab") as fh:
        fh.write(b"\0" * (free_on(where) - leave))
    assert free_on(where) == leave
    return leave


def files_on(where: Path) -> list[str]:
    """Every file under ``where`` but the filler, relative: what a failed write left (no temporary, no half file)."""
    return sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file() and p.name != FILLER)


def full_message(path: Path | str, needed: int | str, free: int) -> str:
    """The one line of a write that found its disk full: ``needed`` bytes (a number, or 'more than N')."""
    return (
        f"cannot write {path}: no space left on its disk (it needs {needed} bytes, {free} bytes are free there); "
        "free some space or write to another disk, then rerun; nothing was written under that name"
    )
