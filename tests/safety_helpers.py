"""Helpers for the safety tests: a listing of a folder, to show that a command refusing bad input changed nothing in
it (issue 17); a torch file whose pickle would run code (issue 30)."""

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


class RunsCode:
    """Pickled, it asks the unpickler to call ``exec`` on code that writes ``marker``: what a hostile .pt file holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def code_running_checkpoint(path: Path, marker: Path) -> Path:
    """A checkpoint-shaped torch file at ``path`` whose pickle would write ``marker`` as it loads."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "recipe": {}, "epoch": 1, "extra": RunsCode(marker)}, path)
    return path
