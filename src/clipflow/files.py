"""Small file helpers the stages share: atomic text writes, JSON-lines journals, input files.

A journal is an append-only JSON-lines file a long stage writes one record to as each
item finishes, so that a killed run resumes without redoing them. A kill can tear only
the last line (it has no newline yet); readers cut that line off so the next append
starts on a line of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def write_text_atomic(path: str | Path, text: str) -> None:
    """Writes ``text`` to a temporary file beside ``path`` and renames it: readers see the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def journal_lines(journal: Path) -> Iterator[tuple[int, dict | None]]:
    """(line number, record) for every complete line of a journal; record is None where the line is no
    JSON object. A torn last line is cut off the file first."""
    if not journal.exists():
        return
    data = journal.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) < len(data):
        with journal.open("r+b") as f:
            f.truncate(len(complete))
    for number, text in enumerate(complete.decode("utf-8", errors="replace").splitlines(), start=1):
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        yield number, record if isinstance(record, dict) else None


def append_record(log: IO[str], record: dict) -> None:
    """Appends one journal record and flushes it, so a kill loses at most the line being written."""
    log.write(json.dumps(record) + "\n")
    log.flush()


def require_nonempty_file(path: Path) -> None:
    """Raises FileNotFoundError or ValueError, with a one-line reason, unless ``path`` is a non-empty file."""
    if not path.exists():
        raise FileNotFoundError("file not found")
    if path.stat().st_size == 0:
        raise ValueError("empty file (0 bytes)")
