"""Saving a torch file whole: :func:`atomic_save` (checkpoints, model files, imported weights), with its checksum."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from clipflow.checksums import put_with_checksum
from clipflow.files import temp_beside


def atomic_save(obj: Any, path: str | Path) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: a crash leaves the old file or the new one.
    ``<path>.sha256`` is written beside it before the rename and renamed with it (:func:`put_with_checksum`). A
    full disk removes the temporary files and is :class:`DiskFull` (a worker adds what a rerun resumes from:
    :func:`telling_resume`)."""
    import torch  # here, not at the top: the launcher, restarts and collect read checkpoints' names, not tensors

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with temp_beside(path, prefix=".") as tmp:  # a new file (never one that was there), no checkpoint's name
        with tmp.open("wb") as fh:
            sink = _Sink(fh)
            try:
                torch.save(obj, sink)
            except RuntimeError:  # torch's writer turns its file's OSError into a RuntimeError: the OSError it was
                if sink.error is None:
                    raise
                raise sink.error from None
            fh.flush()
            os.fsync(fh.fileno())
        put_with_checksum(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _Sink:
    """The file torch.save writes to, keeping the OSError of a write (a full disk's), which torch's zip writer
    reports only as a RuntimeError."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.error = fh, None

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()
