"""Which files in an output folder clipflow wrote, so that a command replaces only those (issue 17).

A command that writes files of its own choosing (``train.lst``, ``manifest.json``, ``job.json``, ...) into a
folder the user names keeps a record there, :data:`RECORD`: each name it wrote (a path relative to the folder)
with the sha256 of the bytes it wrote. Before any work, :meth:`Made.check` looks at every name the command will
write: one that is there but not in the record (someone else's file), or whose bytes changed since clipflow wrote
it (edited by hand), is refused with one message naming it; a name that is absent, or recorded and unchanged,
may be written, so reruns and resumed runs go on as before. A journal the command appends to is recorded by
name only (its bytes change with every line), as are the launcher's role logs, written anew each run.

Every write records the new hash before the file is renamed into place, next to the old one until the rename is
done: a kill between the two leaves a record that accepts either file. The record is read and replaced under a
lock on the folder, so two commands writing into one folder at once keep both their names.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from clipflow.checksums import sha256_of
from clipflow.errors import ClipflowError
from clipflow.files import temp_beside, write_text_atomic

RECORD = ".clipflow-made.json"
JOURNAL = "journal"  # the record's value for a journal: its bytes are not compared
ABOUT = "files clipflow wrote in this folder: name -> sha256 of the bytes written; it replaces only these"


def record_files(text: str) -> dict:
    """The files a record's ``text`` names (name -> sha256s or :data:`JOURNAL`); ValueError when it is not one."""
    try:
        files = json.loads(text)["files"]
    except (KeyError, TypeError):
        raise ValueError("not a record clipflow wrote") from None
    if not isinstance(files, dict):
        raise ValueError("not a record clipflow wrote")
    return files


def record_text(files: dict) -> str:
    """A record's text naming ``files``."""
    return json.dumps({"about": ABOUT, "files": files}, indent=1, sort_keys=True) + "\n"


class Made:
    """The record of ``folder``, the output folder given by ``flag`` (e.g. ``--out-dir``)."""

    def __init__(self, folder: str | Path, flag: str) -> None:
        self.folder, self.flag = Path(folder), flag

    @property
    def record(self) -> Path:
        return self.folder / RECORD

    def check(self, names: Iterable[str], journals: Iterable[str] = ()) -> None:
        """Every one of ``names`` (files written whole) and ``journals`` (appended to) absent, or written by
        clipflow and unchanged; ClipflowError naming the first other one and the way out. Changes nothing."""
        names, journals = list(names), list(journals)
        if not self.folder.is_dir():
            return
        files = self._load()
        for name in [*names, *journals]:
            path = self.folder / name
            if not (path.exists() or path.is_symlink()):
                continue
            known = files.get(name)
            if path.is_symlink() or not path.is_file():
                why = "is a link" if path.is_symlink() else "is a folder"
            elif known is None:
                why = f"is not a file clipflow wrote there (it is not in {RECORD})"
            elif known == JOURNAL or sha256_of(path) in known:
                continue
            else:
                why = "was changed since clipflow wrote it (its bytes differ from those it wrote)"
            raise ClipflowError(
                f"{self.flag} {self.folder}: {path} {why}, and this command would replace it; move it away or "
                f"name another folder; nothing was changed"
            )

    def write_bytes(self, name: str, data: bytes) -> Path:
        """``data`` written atomically to ``folder``/``name``, recorded as clipflow's."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with temp_beside(path, needed=len(data)) as tmp:
            tmp.write_bytes(data)
            self.adopt([(name, tmp, hashlib.sha256(data).hexdigest())])
        return path

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    def write_all(self, files: dict[str, bytes]) -> None:
        """Every one of ``files`` (name -> its bytes) written atomically and recorded as clipflow's in one
        :meth:`adopt`: the record written twice in all, not twice a file (512 worker lists: seconds otherwise)."""
        with contextlib.ExitStack() as stack:
            finished = []
            for name, data in files.items():
                path = self.folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = stack.enter_context(temp_beside(path, needed=len(data)))
                tmp.write_bytes(data)
                finished.append((name, tmp, hashlib.sha256(data).hexdigest()))
            self.adopt(finished)

    def adopt(self, finished: list[tuple[str, Path, str | None]]) -> None:
        """Renames each finished temporary file onto its name (``(name, tmp, sha256 or None to hash it)``),
        recording the hashes first; one record write before and one after, however many files."""
        if not finished:
            return
        done = [(name, tmp, digest or sha256_of(tmp)) for name, tmp, digest in finished]
        with self._locked():
            files = self._load()
            for name, _, digest in done:  # the old bytes stay accepted until the rename is done
                old = files.get(name)
                files[name] = [digest, *(old if isinstance(old, list) and digest not in old else [])]
            self._save(files)
            for name, tmp, _ in done:
                os.replace(tmp, self.folder / name)
            files = self._load()
            for name, _, digest in done:
                files[name] = [digest]
            self._save(files)

    def journal(self, name: str) -> Path:
        """``folder``/``name`` recorded as a journal of clipflow's (before it is made); its path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._locked():
            files = self._load()
            if files.get(name) != JOURNAL:
                files[name] = JOURNAL
                self._save(files)
        return self.folder / name

    def entries(self) -> dict:
        """The record as it is: name -> the sha256s accepted for it (a list) or :data:`JOURNAL`; {} when none."""
        return self._load()

    def update(self, changes: dict[str, list[str] | None]) -> None:
        """Each name of ``changes`` recorded with its accepted sha256s, or forgotten (None), in one record write."""
        with self._locked():
            files = self._load()
            for name, digests in changes.items():
                if digests is None:
                    files.pop(name, None)
                else:
                    files[name] = digests
            self._save(files)

    def _load(self) -> dict:
        if not self.record.exists():
            return {}
        try:
            return record_files(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ClipflowError(
                f"{self.flag} {self.folder}: {self.record} is not a record clipflow wrote, so it cannot tell its "
                f"files from others; name another folder"
            ) from None

    def _save(self, files: dict) -> None:
        write_text_atomic(self.record, record_text(files))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
