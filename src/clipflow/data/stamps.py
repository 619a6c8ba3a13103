"""A video folder's files as they are now, in one digest: what makes the workflow rerun the data stage when a user's
video is replaced, added or removed.

The digest is the sha256 of every regular file's path (relative to the folder), size and modification time, walked
in sorted order; the workflow gives it to the first rule that reads the user's videos as a parameter, and Snakemake
reruns a rule whose parameters changed, with everything after it. The videos' bytes are not read (that is the
scan's sha256, in ``videos.json``), so a parse of a Kinetics-sized folder costs one stat a file. Files and folders
whose names start with "." are left out (a viewer's thumbnails, a sync tool's state), and so is a folder the
workflow writes to inside it (``data.dir``), whose files change with every run.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def folder_stamp(root: str | Path, leave_out: str | Path | None = None) -> str:
    """The digest of the files under ``root`` (see the module); "" when ``root`` is no folder."""
    root = Path(root)
    if not root.is_dir():
        return ""
    skip = Path(leave_out).resolve() if leave_out is not None else None
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and Path(folder, d).resolve() != skip)
        for name in sorted(f for f in files if not f.startswith(".")):
            path = Path(folder, name)
            try:
                info = path.stat()
            except OSError:
                continue  # gone while walking, or a broken link: the scan names it
            digest.update(f"{path.relative_to(root).as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()
