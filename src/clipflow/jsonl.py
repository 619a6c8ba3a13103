"""The append-only JSON-lines records clipflow keeps, one JSON object a line: the launcher's ``restarts.jsonl``,
the trainer's ``metrics.jsonl``, the scan's and the re-encode's journals.

A write cut short (a kill, a full disk, a copy stopped midway, a hand edit) can leave the last line without its
newline; a record appended after it would join that line, and both would be lost. So every writer opens a record
through :func:`open_for_append` first: a cut last line is set aside, its bytes exactly as they were, into a file
of its own beside the record, ``<name>.cut-<n>`` (the first n free; made new, never a file that was there), the
record is cut back to its whole lines, and the log names the set-aside file once with the way out. A last line
that is a whole JSON object (or blank) and lacks only its newline gets its newline instead. A record with a
``.sha256`` beside it (:mod:`clipflow.checksums`) gets the checksum of what it now holds.

Readers (:func:`record_lines`, :func:`journal_lines`) read every whole line; a reader changes nothing, so a cut
last line is left out with one note naming it (the writer sets it aside when it next opens the record).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from clipflow.checksums import checksum_path, record_checksum
from clipflow.files import append_whole
from clipflow.textfile import decode, named, parse_object, read_bytes

CUT = ".cut-"  # <record>.cut-<n>: a cut last line, set aside
TAIL_BLOCK = 1 << 16  # bytes read at a time from a record's end, back to its last newline


def _note(line: str) -> None:
    print(line, file=sys.stderr)


def _split(data: bytes) -> tuple[bytes, bytes]:
    """``data`` as its whole lines (each ended by its newline) and the bytes after the last newline."""
    end = data.rfind(b"\n") + 1
    return data[:end], data[end:]


def _finished_by_newline(tail: bytes) -> bool:
    """A last line that only lacks its newline: blank, or a whole JSON object."""
    if not tail.strip():
        return True
    try:
        return isinstance(json.loads(tail.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def cut_path(path: Path, number: int) -> Path:
    return path.with_name(f"{path.name}{CUT}{number}")


def _set_aside(path: Path, data: bytes) -> Path:
    """``data`` in a new file ``<path>.cut-<n>``, the first n free (created exclusively)."""
    number = 1
    while True:
        aside = cut_path(path, number)
        try:
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            number += 1
            continue
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            aside.unlink(missing_ok=True)
            raise
        return aside


def _end(path: Path) -> tuple[int, bytes]:
    """Where ``path``'s whole lines end and the bytes after them, read from its end only (a journal can be long)."""
    with path.open("rb") as fh:
        start = fh.seek(0, os.SEEK_END)
        tail = b""
        while start:
            step = min(TAIL_BLOCK, start)
            start -= step
            fh.seek(start)
            block = fh.read(step) + tail
            newline = block.rfind(b"\n")
            if newline >= 0:
                return start + newline + 1, block[newline + 1 :]
            tail = block
        return 0, tail


def open_for_append(path: str | Path, log: Callable[[str], None] = print) -> Path | None:
    """Makes the record ``path`` (when it is there) end in a whole line before a record is added to it, as the
    module's docstring says; the set-aside file, or None when nothing was cut."""
    path = Path(path)
    try:
        whole, tail = _end(path)
    except FileNotFoundError:
        return None
    if not tail:
        return None
    aside = None
    if _finished_by_newline(tail):
        with path.open("ab") as fh:
            fh.write(b"\n")
    else:
        aside = _set_aside(path, tail)  # first: a crash before the cut below leaves the bytes twice, never lost
        with path.open("r+b") as fh:
            fh.truncate(whole)
    if checksum_path(path).exists():
        record_checksum(path)
    if aside is not None:
        kept = path.read_bytes().count(b"\n")  # only when a line was cut: the count the message gives
        log(f"clipflow: {path} ended in a line cut short ({len(tail)} bytes without a newline, from a write that "
            f"was stopped): its bytes are set aside in {aside} and the record goes on after its "
            f"{kept} whole lines; look at {aside.name} and delete it when it holds nothing you need")  # fmt: skip
    return aside


def record_lines(path: str | Path, what: str, expected: str,
                 note: Callable[[str], None] = _note) -> Iterator[tuple[int, dict]]:  # fmt: skip
    """(line number, object) for every non-blank whole line of the record ``path`` (a ``what``; ``expected``:
    what a line should be). A whole line that is not JSON, or not an object, is a ClipflowError naming the file
    and the line; a cut last line (no newline, not a whole object) is left out with one ``note`` naming it."""
    path = Path(path)
    where = named(what, path)
    whole, tail = _split(read_bytes(path, what))
    text = decode(whole, where, fix=f"expected {expected}")
    lines = text.split("\n")[:-1]  # not splitlines: JSON strings may hold U+2028
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, parse_object(line, f"{where} line {number}", expected, one_line=True)
    if not tail.strip():
        return
    if _finished_by_newline(tail):
        yield len(lines) + 1, json.loads(tail.decode("utf-8"))
        return
    note(f"clipflow: note: {where} line {len(lines) + 1} is cut short ({len(tail)} bytes without a newline, from "
         "a write that was stopped): left out; the next write to the record sets it aside beside it")  # fmt: skip


def journal_lines(journal: Path, log: Callable[[str], None] = print) -> Iterator[tuple[int, dict | None]]:
    """(line number, record) for every whole line of a journal; record is None where the line is no JSON object.
    A cut last line is set aside first (:func:`open_for_append`), so the next append starts on a line of its own."""
    if not journal.exists():
        return
    open_for_append(journal, log)
    text = journal.read_bytes().decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        yield number, record if isinstance(record, dict) else None


def append_record(log: IO[str], record: dict) -> None:
    """Appends one journal record (:func:`clipflow.files.append_whole`): a kill loses at most the line being
    written, a full disk cuts the part it wrote off again and is :class:`clipflow.files.DiskFull`."""
    log.flush()
    append_whole(log.fileno(), log.name, (json.dumps(record) + "\n").encode("utf-8"))
