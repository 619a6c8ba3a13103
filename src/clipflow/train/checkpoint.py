"""Checkpoints: complete, written atomically, the newest one that loads is the one resumed.

A checkpoint file holds everything training needs to go on: weights, optimizer
state, schedule position, epoch, RNG states, and the fingerprint of the settings it
was made with. One made inside an epoch (train.save_every_iters) also holds how many
iterations of it were done, the sampler's position and the epoch's totals so far; it
is named ``epoch_EEEE_iter_IIIIII.pt``, an epoch's end ``epoch_EEEE.pt``. Every checkpoint
also holds the settings it was made with (``facts``: :mod:`clipflow.train.resume_check`
compares them with a new job's). Files go straight into the run's checkpoint folder
(``results/<run>/checkpoints/``), which is not a declared output of the workflow, so a
failed run never deletes them. Every file saved here also gets its sha256 recorded beside
it (``<file>.sha256``), which collection checks its copies with.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clipflow.checksums import checksum_path, parse_checksum, put_with_checksum, sha256_of
from clipflow.errors import ClipflowError
from clipflow.files import DiskFull, temp_beside

NAME = re.compile(r"^epoch_(\d{4,})(?:_iter_(\d{6,}))?\.pt$")
Point = tuple[int, int]  # (epoch, iterations done in it; 0: the epoch is complete)

RUN_FACTS = "run.json"  # beside the checkpoints: what `clipflow status` and collection need to know of the run


def order_points(names: list[str]) -> list[Point]:
    """The (epoch, iteration) of every checkpoint name among ``names``, oldest first: inside epoch e comes after
    e - 1's end."""
    found = [(int(m.group(1)), int(m.group(2) or 0)) for name in names if (m := NAME.match(name))]
    return sorted(found, key=point_order)


def point_order(point: Point) -> tuple[int, int]:
    """What sorts checkpoints oldest first: a checkpoint inside epoch e comes after e - 1's end."""
    return (point[0] - 1, point[1]) if point[1] else (point[0], 0)


def checkpoint_name(epoch: int, iteration: int = 0) -> str:
    return f"epoch_{epoch:04d}_iter_{iteration:06d}.pt" if iteration else f"epoch_{epoch:04d}.pt"


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


@contextlib.contextmanager
def telling_resume(folder: Path) -> Iterator[None]:
    """A worker's training, whose checkpoints go to ``folder``: a full disk in it (:class:`DiskFull`, a checkpoint
    or any other file) also says what a rerun resumes from (:func:`resumable_from`)."""
    try:
        yield
    except DiskFull as exc:
        raise DiskFull(f"{exc}; {resumable_from(folder)}") from None


def resumable_from(folder: Path) -> str:
    """What a rerun of the run whose checkpoints are in ``folder`` goes on from, truly: its newest checkpoint whose
    bytes match the sha256 recorded beside it, or that there is none and the run starts afresh."""
    for point in reversed(order_points([p.name for p in folder.iterdir()] if folder.is_dir() else [])):
        path = folder / checkpoint_name(*point)
        try:
            if parse_checksum(checksum_path(path).read_text(encoding="utf-8"), path.name) == sha256_of(path):
                return f"a rerun resumes from {path}"
        except (OSError, ValueError):
            continue
    return f"{folder} holds no complete checkpoint, so a rerun starts afresh"


class CheckpointStore:
    def __init__(self, folder: str | Path, keep: int = 3, log=print):
        if keep < 1:  # points()[:-0] would prune nothing, [:-(-1)] the oldest whatever the count: neither is meant
            raise ValueError(f"keep must be >= 1 (checkpoints kept), got {keep}")
        self.folder = Path(folder)
        self.keep = keep
        self.log = log

    def path(self, epoch: int, iteration: int = 0) -> Path:
        return self.folder / checkpoint_name(epoch, iteration)

    def points(self) -> list[Point]:
        """The (epoch, iteration) of every checkpoint here, oldest first: inside epoch e comes after e - 1's end."""
        if not self.folder.is_dir():
            return []
        return order_points([p.name for p in self.folder.iterdir()])

    def epochs(self) -> list[int]:
        """The epochs whose end has a checkpoint."""
        return [epoch for epoch, iteration in self.points() if not iteration]

    def save(self, state: dict, epoch: int, iteration: int = 0) -> Path:
        path = self.path(epoch, iteration)
        atomic_save(state, path)
        # pruning touches only epoch_*.pt names (and their .sha256) in this folder, the run's own: best.pt,
        # best.json, run.json, job.json, set-aside folders and anything else there are never removed; keep >= 1
        # (the recipe schema), so never the newest
        for old in self.points()[: -self.keep]:
            self.path(*old).unlink(missing_ok=True)
            checksum_path(self.path(*old)).unlink(missing_ok=True)
        return path

    def load_newest(self) -> tuple[dict, Path] | None:
        """The newest checkpoint that loads; a damaged one is reported and skipped, never deleted. None when there
        is no checkpoint; checkpoints none of which loads are a ClipflowError naming them (never a silent fresh
        start)."""
        points = self.points()
        if not points:
            return None  # no torch import for a folder without checkpoints (a fresh run's launcher)
        import torch

        for point in reversed(points):
            path = self.path(*point)
            try:
                state = torch.load(path, map_location="cpu", weights_only=False)
                if not isinstance(state, dict) or "model" not in state:
                    raise ValueError("not a clipflow checkpoint")
                return state, path
            except Exception as exc:
                self.log(f"checkpoint {path} cannot be loaded ({str(exc).splitlines()[0][:120]}); trying an older one")
        if points:
            names = ", ".join(checkpoint_name(*point) for point in points)
            raise ClipflowError(
                f"{self.folder}: none of its checkpoints loads ({names}); restore a good copy there, or set "
                "train.resume: never (--resume never) to start afresh with them set aside"
            )
        return None
