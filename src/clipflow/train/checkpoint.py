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

The folder's record of what clipflow wrote (:mod:`clipflow.made`, ``.clipflow-made.json``) names every checkpoint
the store saved with the sha256 of its bytes: the run's checkpoints are those, not whatever bears a checkpoint's
name. The newest one resumed from is the newest recorded one whose bytes are still the ones written; pruning
removes only recorded, unchanged ones (with their ``.sha256``). Any other file with a checkpoint's name is left in
place, never resumed from, and named once in the log. A folder whose record names no checkpoint holds a run from
before the record: its checkpoint names are the run's to resume from (each checked against its ``.sha256`` when it
has one), and the first save records those whose ``.sha256`` verifies as the run's; the rest are foreign from then
on, so nothing not proven clipflow's is ever pruned. The run's other files there (:data:`RUN_FILES`: best.pt and
best.json, the history, run.json) are recorded and replaced the same way (:meth:`CheckpointStore.put`; the history
by its name, as a journal); one that is not the run's is moved aside and named, never replaced. Every load is
weights-only (:mod:`clipflow.safe_load`).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from clipflow.checksums import (
    checksum_path,
    damage,
    recorded_beside,
    sha256_of,
    write_text_with_checksum,
)
from clipflow.errors import ClipflowError
from clipflow.files import DiskFull
from clipflow.made import JOURNAL, RECORD, Made, record_files
from clipflow.saving import atomic_save

NAME = re.compile(r"^epoch_(\d{4,})(?:_iter_(\d{6,}))?\.pt$")
Point = tuple[int, int]  # (epoch, iterations done in it; 0: the epoch is complete)

FLAG = "--checkpoint-root"  # the run's checkpoint folder, as clipflow.made's messages name it
PENDING = "being written"  # a record entry's mark from before a save until its sha256 is recorded (see save)
RUN_FACTS = "run.json"  # beside the checkpoints: what `clipflow status` and collection need to know of the run
HISTORY = "metrics.jsonl"  # beside the checkpoints: a line an epoch
BEST, BEST_FACTS = "best.pt", "best.json"  # beside the checkpoints: the best validated model so far, and its scores
RUN_FILES = (BEST, BEST_FACTS, HISTORY, RUN_FACTS)  # the run's other files there, recorded and carried like them
JOURNALS = (HISTORY,)  # of those, recorded by name only (clipflow.made.JOURNAL): a cut last line is repaired on open


def order_points(names: list[str]) -> list[Point]:
    """The (epoch, iteration) of every checkpoint name among ``names``, oldest first: inside epoch e comes after
    e - 1's end."""
    found = [(int(m.group(1)), int(m.group(2) or 0)) for name in names if (m := NAME.match(name))]
    return sorted(found, key=point_order)


def run_points(names: Iterable[str], files: dict) -> list[Point]:
    """The run's checkpoints among ``names`` (a folder's listing), oldest first, as the folder's record ``files``
    names them (:meth:`clipflow.made.Made.entries`): the recorded ones there; every checkpoint name in a folder
    whose record names none (a run from before the record)."""
    names = list(names)
    if names_checkpoints(files):
        return order_points([name for name in names if name in files])
    return order_points(names)


def points_there(where, folder: str) -> list[Point]:
    """:func:`run_points` of ``folder`` on ``where``'s host (:mod:`clipflow.hosts.files`), from its listing and
    its record; a record that cannot be read names none (then each copy is checked by its ``.sha256``)."""
    names = where.names(folder)
    files: dict = {}
    if RECORD in names:
        try:
            files = record_files(where.read_text(f"{folder}/{RECORD}"))
        except (OSError, ValueError):
            files = {}
    return run_points(names, files)


def entry_of(name: str, digest: str) -> list[str] | str:
    """The record's entry for the run's file ``name`` whose bytes have the sha256 ``digest``."""
    return JOURNAL if name in JOURNALS else [digest]


def names_checkpoints(files: dict) -> bool:
    """Whether a record's ``files`` name any checkpoint: a store wrote there since checkpoints are recorded."""
    return any(NAME.match(name) for name in files)


def point_order(point: Point) -> tuple[int, int]:
    """What sorts checkpoints oldest first: a checkpoint inside epoch e comes after e - 1's end."""
    return (point[0] - 1, point[1]) if point[1] else (point[0], 0)


def checkpoint_name(epoch: int, iteration: int = 0) -> str:
    return f"epoch_{epoch:04d}_iter_{iteration:06d}.pt" if iteration else f"epoch_{epoch:04d}.pt"


@contextlib.contextmanager
def telling_resume(folder: Path) -> Iterator[None]:
    """A worker's training, whose checkpoints go to ``folder``: a full disk in it (:class:`DiskFull`, a checkpoint
    or any other file) also says what a rerun resumes from (:func:`resumable_from`)."""
    try:
        yield
    except DiskFull as exc:
        raise DiskFull(f"{exc}; {resumable_from(folder)}") from None


def resumable_from(folder: Path) -> str:
    """What a rerun of the run whose checkpoints are in ``folder`` goes on from, truly: the newest of the run's
    checkpoints whose bytes are the ones written (:meth:`CheckpointStore.newest_intact`), or that there is none and
    the run starts afresh."""
    try:
        path = CheckpointStore(folder, log=lambda line: None).newest_intact()
    except ClipflowError as exc:  # a record that is not clipflow's: what the rerun will say
        return str(exc)
    if path is None:
        return f"{folder} holds no complete checkpoint, so a rerun starts afresh"
    return f"a rerun resumes from {path}"


class CheckpointStore:
    def __init__(self, folder: str | Path, keep: int = 3, log=print, name_others: bool = True):
        if keep < 1:  # points()[:-0] would prune nothing, [:-(-1)] the oldest whatever the count: neither is meant
            raise ValueError(f"keep must be >= 1 (checkpoints kept), got {keep}")
        self.folder = Path(folder)
        self.keep = keep
        self.log = log
        self.made = Made(self.folder, FLAG)
        self.said: set[str] = set()  # the names of files left alone, each said once
        self.name_others = name_others  # False: the launcher's look before rank 0's, which names them

    def path(self, epoch: int, iteration: int = 0) -> Path:
        return self.folder / checkpoint_name(epoch, iteration)

    def points(self) -> list[Point]:
        """The (epoch, iteration) of every checkpoint of the run here, oldest first: inside epoch e comes after
        e - 1's end (:func:`run_points`; the bytes are checked when one is resumed from or pruned)."""
        return self._points(self._files())

    def epochs(self) -> list[int]:
        """The epochs whose end has a checkpoint."""
        return [epoch for epoch, iteration in self.points() if not iteration]

    def save(self, state: dict, epoch: int, iteration: int = 0) -> Path:
        """``state`` saved as the checkpoint of ``epoch`` (``iteration`` into it), recorded as the run's
        (:meth:`put`); then the run's checkpoints beyond the newest ``keep`` are pruned."""
        path = self.put(checkpoint_name(epoch, iteration), lambda to: atomic_save(state, to))
        self._prune()
        return path

    def put(self, name: str, write: Callable[[Path], None]) -> Path:
        """The run's file ``name`` here (a checkpoint or one of :data:`RUN_FILES`) written by ``write(path)``, which
        puts it and its ``.sha256`` in place together, and recorded as the run's. A file of that name that is not
        the run's (not recorded, or changed since) is moved aside first, never replaced. Before the write the name
        is recorded as :data:`PENDING` (its ``.sha256`` then decides), so a kill before its sha256 is recorded
        still leaves it the run's."""
        path = self.folder / name
        files = self._files()
        changes = self._adopted(files)
        prior = changes.get(name) or files.get(name)
        if path.is_symlink() or (path.exists() and not (name in changes or self._recorded_as_runs(name, files))):
            self._move_aside(path)  # someone else's file of this name (or one changed since): kept, never replaced
        if name in JOURNALS:  # recorded by its name: its bytes are not compared
            if changes:
                self.made.update(changes)
            self.made.journal(name)  # writes the record only when it does not name the journal yet
            write(path)
            return path
        accepted = [d for d in prior if d != PENDING] if isinstance(prior, list) else []
        changes[name] = [*accepted, PENDING]  # the old bytes stay accepted until the new ones are in place
        self.made.update(changes)
        try:
            write(path)
        except BaseException:  # a full disk, an interrupt: where the new bytes never reached the name, the record
            with contextlib.suppress(Exception):  # goes back as it was
                if not path.exists() or sha256_of(path) in accepted:
                    self.made.update({name: accepted or None})
            raise
        self.made.update({name: [recorded_beside(path) or sha256_of(path)]})
        return path

    def is_runs(self, name: str) -> bool:
        """Whether the file ``name`` here is the run's as written (recorded and unchanged, or proven by its
        ``.sha256`` in a folder from before the record): what a resume may read."""
        files = self._files()
        if not (self.folder / name).is_file():
            return False
        return self._recorded_as_runs(name, files) or self._proven(name, files) is not None

    def put_text(self, name: str, text: str) -> Path:
        """:meth:`put` of ``text`` with its checksum (one of :data:`RUN_FILES`)."""
        return self.put(name, lambda to: write_text_with_checksum(to, text))

    def load_newest(self) -> tuple[dict, Path] | None:
        """The newest checkpoint of the run that loads; a damaged or changed one is reported and skipped, never
        deleted. None when there is no checkpoint; checkpoints none of which loads are a ClipflowError naming them
        (never a silent fresh start), as is one whose pickle asks for more than a checkpoint holds."""
        files = self._files()
        points = self._points(files)
        self._say_foreign(files)
        if not points:
            return None  # no torch import for a folder without checkpoints (a fresh run's launcher)
        from clipflow.safe_load import load_weights_only

        for point in reversed(points):
            path = self.path(*point)
            try:
                why = self._changed(path.name, files)
                if why:
                    raise ValueError(why)
                state = load_weights_only(path, "checkpoint")
                if not isinstance(state, dict) or "model" not in state:
                    raise ValueError("not a clipflow checkpoint")
                return state, path
            except ClipflowError:
                raise
            except Exception as exc:
                self.log(f"checkpoint {path} cannot be loaded ({str(exc).splitlines()[0][:200]}); trying an older one")
        names = ", ".join(checkpoint_name(*point) for point in points)
        raise ClipflowError(
            f"{self.folder}: none of its checkpoints loads ({names}); restore a good copy there, or set "
            "train.resume: never (--resume never) to start afresh with them set aside"
        )

    def newest_intact(self) -> Path | None:
        """The newest of the run's checkpoints whose bytes are the ones written (what :meth:`load_newest` resumes
        from when it loads); not loaded."""
        files = self._files()
        for point in reversed(self._points(files)):
            path = self.path(*point)
            try:
                if not self._changed(path.name, files):
                    return path
            except OSError:
                continue
        return None

    def make_way(self, name: str) -> None:
        """A file ``name`` here that is not the run's moved aside (named in the log), so that a copy of the run's
        file of that name can come here (then :meth:`record_copies`)."""
        path = self.folder / name
        if (path.exists() or path.is_symlink()) and not self.is_runs(name):
            self._move_aside(path)

    def record_copies(self, digests: dict[str, str]) -> None:
        """The run's files copied here (name -> the sha256 each copy was checked against), recorded as the run's
        in one record write."""
        changes = self._adopted(self._files())
        changes.update({name: entry_of(name, digest) for name, digest in digests.items()})
        self.made.update(changes)

    # -- what is the run's ---------------------------------------------------------------------------

    def _files(self) -> dict:
        return self.made.entries() if self.folder.is_dir() else {}

    def _names(self) -> list[str]:
        return [p.name for p in self.folder.iterdir()] if self.folder.is_dir() else []

    def _points(self, files: dict) -> list[Point]:
        return run_points(self._names(), files)

    def _changed(self, name: str, files: dict) -> str | None:
        """Why the checkpoint ``name`` here is not as clipflow wrote it (damaged, replaced, its save cut short), or
        None. A recorded one: it has no ``.sha256`` beside it, or its sha256 is not the recorded one (while it is
        being written: not its ``.sha256``'s); one of a folder from before the record: its ``.sha256`` records other
        bytes (none there: nothing to check it by)."""
        path = self.folder / name
        found = sha256_of(path)
        entry = files.get(name)
        if not isinstance(entry, list):
            return damage(path, found)
        beside = recorded_beside(path)
        if beside is None:  # atomic_save renames the two together: collection could not check a copy of it
            return f"its save was cut short, or its {checksum_path(path).name} was removed: it has no sha256 beside it"
        if found in entry or (PENDING in entry and beside == found):
            return None
        return damage(path, found) or (
            f"changed since clipflow wrote it: its sha256 {found[:12]}... is not the one {RECORD} records"
        )

    def _recorded_as_runs(self, name: str, files: dict) -> bool:
        """Whether the record ``files`` names the file ``name`` here as the run's: a journal by its name, any other
        file with the bytes it has now."""
        entry = files.get(name)
        if name in JOURNALS and entry == JOURNAL:
            return True
        try:
            return isinstance(entry, list) and not self._changed(name, files)
        except OSError:
            return False

    def _proven(self, name: str, files: dict) -> str | None:
        """The sha256 of the file ``name`` of a folder from before the record when its ``.sha256`` proves it the
        run's (a checkpoint while the record names none, one of :data:`RUN_FILES` while it names none of them);
        else None."""
        if NAME.match(name):
            before = not names_checkpoints(files)
        else:
            before = name in RUN_FILES and not any(other in files for other in RUN_FILES)
        path = self.folder / name
        if not (before and path.is_file()):
            return None
        found = sha256_of(path)
        return found if recorded_beside(path) == found else None

    def _adopted(self, files: dict) -> dict[str, list[str] | str]:
        """What a folder from before the record holds that its ``.sha256`` proves the run's (:meth:`_proven`), as
        the record's entries that adopt it."""
        names = [*(checkpoint_name(*point) for point in self._points(files)), *RUN_FILES]
        proven = {name: self._proven(name, files) for name in names}
        return {name: entry_of(name, digest) for name, digest in proven.items() if digest is not None}

    def _say_foreign(self, files: dict) -> None:
        """Each file with a checkpoint's name that the record does not name as the run's, said once."""
        if not names_checkpoints(files) or not self.name_others:
            return
        for name in sorted(n for n in self._names() if NAME.match(n) and n not in files):
            self._say_once(
                name,
                f"{self.folder / name}: not a checkpoint clipflow wrote for this run (it is not in {RECORD}): left "
                f"in place, never resumed from nor pruned; move it out of {self.folder} if it is not to stay there",
            )

    def _say_once(self, name: str, line: str) -> None:
        if name not in self.said:
            self.said.add(name)
            self.log(line)

    def _move_aside(self, path: Path) -> None:
        """``path``, which is not the run's, moved to ``<name>.not-clipflow-<UTC>`` beside it, with the
        ``.sha256`` beside it if any (the run's save replaces that name too)."""
        base = f"{path.name}.not-clipflow-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        aside, n = path.with_name(base), 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = path.with_name(f"{base}-{n}")
        os.replace(path, aside)
        if checksum_path(path).exists() or checksum_path(path).is_symlink():
            os.replace(checksum_path(path), checksum_path(aside))
        self.log(f"{path}: not a file clipflow wrote for this run, and the run writes one of that name now: "
                 f"moved to {aside.name} beside it, not replaced")  # fmt: skip

    def _prune(self) -> None:
        """The run's checkpoints beyond the newest ``keep`` removed, with their ``.sha256``, where their bytes are
        the ones written (keep >= 1, so never the newest); best.pt, run.json, job.json, set-aside folders and
        every file not recorded as the run's stay."""
        files = self._files()
        self._say_foreign(files)
        gone: dict[str, list[str] | None] = {}
        for point in self._points(files)[: -self.keep]:
            path = self.path(*point)
            why = self._changed(path.name, files)
            if why:
                self._say_once(path.name, f"checkpoint {path} is not pruned ({why}): left in place")
                continue
            path.unlink(missing_ok=True)
            checksum_path(path).unlink(missing_ok=True)
            gone[path.name] = None
        if gone:
            self.made.update(gone)
