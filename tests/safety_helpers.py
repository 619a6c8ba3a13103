"""A listing of a folder, to show that a command refusing bad input changed nothing in it (issue 17)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def listing(folder: Path) -> dict[str, tuple]:
    """Every path under ``folder`` (relative) with what would show a change: kind, size, mtime and, for a file, its
    sha256; links are listed as links, never followed."""
    found: dict[str, tuple] = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            found[str(path.relative_to(folder))] = ("link", str(path.readlink()), st.st_mtime_ns)
        elif path.is_dir():
            found[str(path.relative_to(folder))] = ("dir", st.st_mtime_ns)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(folder))] = ("file", st.st_size, st.st_mtime_ns, digest)
    return found
