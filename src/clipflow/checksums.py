"""sha256 checksums recorded beside the files clipflow writes, in ``sha256sum``'s format.

The writer records ``<file>.sha256`` (``<hex digest>  <file name>``) with the file itself,
so that a copy made later, anywhere, can be checked against what was written
(``sha256sum -c`` reads it too). Both are written whole under temporary names first and
renamed only then (:func:`put_with_checksum`): a full disk leaves the old pair, never a
file without its checksum, and a reader sees no checksum or a whole one.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from clipflow.files import temp_beside, write_text_atomic

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
    """``text`` written atomically to ``path`` with its checksum (:func:`put_with_checksum`)."""
    path = Path(path)
    data = text.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with temp_beside(path, needed=len(data)) as tmp:
        tmp.write_bytes(data)
        put_with_checksum(tmp, path, hashlib.sha256(data).hexdigest())


def put_with_checksum(tmp: Path, path: Path, digest: str | None = None) -> None:
    """The complete file ``tmp`` renamed onto ``path`` with its checksum (``digest``, or computed), both written
    before either is renamed: a full disk leaves the old pair as it was. The old checksum goes just before the
    renames, so a crash between them leaves the file without one (reported as such), never beside a checksum of
    other contents."""
    digest = digest or sha256_of(tmp)
    line = f"{digest}  {path.name}\n".encode()
    with temp_beside(checksum_path(path), needed=len(line)) as tmp_sum:
        tmp_sum.write_bytes(line)
        checksum_path(path).unlink(missing_ok=True)
        os.replace(tmp, path)
        os.replace(tmp_sum, checksum_path(path))


def parse_checksum(text: str, name: str) -> str:
    """The digest a checksum file records for ``name``; ValueError with the reason when it records none."""
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m and Path(m.group(2)).name == name:
            return m.group(1)
    raise ValueError(f"it records no sha256 for {name}")


def recorded_beside(path: str | Path) -> str | None:
    """The digest ``<path>.sha256`` records for ``path``; None when there is none, or none that can be read."""
    path = Path(path)
    try:
        return parse_checksum(checksum_path(path).read_text(encoding="utf-8", errors="replace"), path.name)
    except (OSError, ValueError):
        return None


def damage(path: str | Path, found: str | None = None) -> str | None:
    """Why ``path`` is damaged when the ``.sha256`` beside it records other bytes (truncated, changed); None when
    it matches or none is there. ``found``: the file's sha256, when known."""
    recorded = recorded_beside(path)
    if recorded is None:
        return None
    found = found or sha256_of(path)
    if found == recorded:
        return None
    return (
        f"damaged: its sha256 is {found[:12]}..., not the {recorded[:12]}... its writer recorded in "
        f"{checksum_path(path).name} (truncated or changed since)"
    )
