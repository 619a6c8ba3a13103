"""sha256 checksums recorded beside the files clipflow writes, in ``sha256sum``'s format.

The writer records ``<file>.sha256`` (``<hex digest>  <file name>``) right after the
file itself is complete, so that a copy made later, anywhere, can be checked against
what was written (``sha256sum -c`` reads it too). The checksum file is written
atomically: a reader sees no checksum or a whole one.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

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
    target = checksum_path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(f"{digest}  {path.name}\n", encoding="ascii")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def parse_checksum(text: str, name: str) -> str:
    """The digest a checksum file records for ``name``; ValueError with the reason when it records none."""
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m and Path(m.group(2)).name == name:
            return m.group(1)
    raise ValueError(f"it records no sha256 for {name}")
