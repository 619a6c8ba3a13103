"""What clipflow put in a folder on a host, recorded there as :mod:`clipflow.made` records a folder here: the same
file (:data:`clipflow.made.RECORD`) and format, each name a path relative to the folder with the sha256 of the bytes
put there. A push into a run's folder on a host (:func:`clipflow.launch.push.push_job_files`) replaces only files of
that record: a file of a name it writes that the record does not name (someone's own, or another tool's) is refused
with its host and path, never replaced. Checkpoints carried to rank 0's host are recorded in the checkpoint folder's
record the same way (:func:`clipflow.train.host_run.place_newest_checkpoint`), which the run's store reads.
"""

from __future__ import annotations

import posixpath
import tempfile
from collections.abc import Iterable
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.hosts.files import SftpFiles
from clipflow.made import RECORD, record_files, record_text


def read_record(where: SftpFiles, folder: str, what: str = "the folder") -> dict:
    """The record of ``folder`` on ``where``'s host (name -> entry); {} when there is none. ClipflowError naming it
    when it is there but not a record clipflow wrote (``what`` says whose folder it is)."""
    path = f"{folder}/{RECORD}"
    if not where.exists(path):
        return {}
    try:
        return record_files(where.read_text(path))
    except ValueError:
        raise ClipflowError(
            f"{where.host}: {where.shown(path)} is not a record clipflow wrote, so it cannot tell {what}'s files from "
            "others; move it away there"
        ) from None


def write_record(where: SftpFiles, folder: str, files: dict) -> None:
    """``files`` (name -> entry) written as ``folder``'s record on ``where``'s host, whole (put under a temporary
    name and renamed: a reader sees the old record or the new one)."""
    with tempfile.TemporaryDirectory(prefix="clipflow-record-") as scratch:
        text = Path(scratch) / RECORD
        text.write_text(record_text(files), encoding="utf-8")
        where.put(text, f"{folder}/{RECORD}")


def check_ours(where: SftpFiles, folder: str, record: dict, paths: Iterable[str], fix: str) -> None:
    """ClipflowError naming the first of ``paths`` (under ``folder``) that is on ``where``'s host but not in
    ``folder``'s ``record``: clipflow did not put it there, so it is not replaced. ``fix`` ends the message."""
    for path in paths:
        if name_in(folder, path) not in record and where.exists(path):
            raise ClipflowError(
                f"{where.host}: {where.shown(path)} is not a file clipflow put there (its folder's {RECORD} does not "
                f"name it), so it is not replaced; {fix}"
            )


def name_in(folder: str, path: str) -> str:
    """``path``'s name in ``folder``'s record: its path relative to the folder (``path`` must be under it)."""
    name = posixpath.relpath(path, folder)
    assert not name.startswith(".."), f"{path} is not under {folder}"
    return name
