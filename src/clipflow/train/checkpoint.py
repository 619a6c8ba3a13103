"""Checkpoints: complete, written atomically, the newest one that loads is the one resumed.

A checkpoint file holds everything training needs to go on: weights, optimizer
state, schedule position, epoch, RNG states, and the fingerprint of the settings it
was made with. Files go to a folder of their own per fingerprint, which is not a
declared output of the workflow, so a failed run never deletes them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

NAME = re.compile(r"^epoch_(\d{4,})\.pt$")


def atomic_save(obj: Any, path: str | Path) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: a crash leaves the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class CheckpointStore:
    def __init__(self, folder: str | Path, keep: int = 3, log=print):
        self.folder = Path(folder)
        self.keep = keep
        self.log = log

    def path(self, epoch: int) -> Path:
        return self.folder / f"epoch_{epoch:04d}.pt"

    def epochs(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := NAME.match(p.name)))

    def save(self, state: dict, epoch: int) -> Path:
        path = self.path(epoch)
        atomic_save(state, path)
        for old in self.epochs()[: -self.keep]:
            self.path(old).unlink(missing_ok=True)
        return path

    def load_newest(self) -> tuple[dict, Path] | None:
        """The newest checkpoint that loads; a damaged one is reported and skipped, never deleted."""
        for epoch in reversed(self.epochs()):
            path = self.path(epoch)
            try:
                state = torch.load(path, map_location="cpu", weights_only=False)
                if not isinstance(state, dict) or "model" not in state:
                    raise ValueError("not a clipflow checkpoint")
                return state, path
            except Exception as exc:
                self.log(f"checkpoint {path} cannot be loaded ({str(exc).splitlines()[0][:120]}); trying an older one")
        return None
