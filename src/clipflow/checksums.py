"""sha256 checksums recorded beside the files clipflow writes, in ``sha256sum``'s format.

The writer records ``<file>.sha256`` (``<hex digest>  <file name>``) right after the
file itself is complete, so that a copy made later, anywhere, can be checked against
what was written (``sha256sum -c`` reads it too). The checksum file is written
atomically: a reader sees no checksum or a whole one.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from clipflow.files import write_text_atomic

SUFFIX = ".sha256"
LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")
CHUNK = 1 << 20


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SUFFIX)


def record_checksum(path: str | Path) -> str:
    """Writes ``<path>.sha256`` for the file as it is now; returns the digest."""
    path = Path(path)
    digest = sha256_of(path)
    write_text_atomic(checksum_path(path), f"{digest}  {path.name}\n")
    return digest


def write_text_with_checksum(path: str | Path, text: str) -> None:
    """``text`` written atomically to ``path``, then its checksum; the old checksum goes first, so a crash in
    between leaves the file without one (reported as such), never beside a checksum of other contents."""
    checksum_path(path).unlink(missing_ok=True)
    write_text_atomic(path, text)
    record_checksum(path)


def parse_checksum(text: str, name: str) -> str:
    """The digest a checksum file records for ``name``; ValueError with the reason when it records none."""
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m and Path(m.group(2)).name == name:
            return m.group(1)
    raise ValueError(f"it records no sha256 for {name}")
