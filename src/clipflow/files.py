"""Small file helpers the stages share: atomic writes and the checks on
an output path that a command makes before it starts its work.

An atomic write goes through a temporary file of a fresh name beside the target (made with O_EXCL, so it is
never a file someone else had there) that is removed again on any failure: a failed write leaves the old file
and nothing else. The output checks refuse, with one message naming the flag, the path and the way out, a file
path that is a folder, a folder path that is a file, and a path whose folder cannot be made, so that a command
fails on them before hours of work rather than after.

A full disk (ENOSPC) or an exceeded quota (EDQUOT) while writing is :class:`DiskFull`, a ClipflowError of one line
naming the file, the bytes it needed (or, where the writer cannot know them before it is done, at least how many it
had written) and the bytes free there (``os.statvfs``, after the temporary file is removed): every write goes
through :func:`temp_beside` or :func:`room_for`, which turn the OSError into it.

The append-only JSON-lines records (journals included) are :mod:`clipflow.jsonl`'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from clipflow.errors import ClipflowError


def write_text_atomic(path: str | Path, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` atomically: :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Writes ``data`` to a temporary file beside ``path`` and renames it: readers see the old or the new file.
    On any failure (a full disk, ``path`` a folder, an interrupt) the temporary file is removed and the error
    raised (:class:`DiskFull` for a full disk): nothing is left behind, and no file that was there before is
    touched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():  # os.replace would fail only after the data was written
        raise IsADirectoryError(21, "Is a directory", str(path))
    with temp_beside(path, needed=len(data)) as tmp:
        tmp.write_bytes(data)
        os.replace(tmp, path)


FULL = (errno.ENOSPC, errno.EDQUOT)  # the errors of a full disk or quota
WHY_FULL = {errno.ENOSPC: "no space left on its disk", errno.EDQUOT: "the disk quota is exceeded"}


class DiskFull(ClipflowError):
    """A write that found its disk full (ENOSPC) or its quota spent (EDQUOT); nothing half-written was left under
    the file's name. One line, :meth:`of` makes it."""

    what: tuple = ()  # (path, code, needed, written) of :meth:`of`, to measure the free bytes again

    @classmethod
    def of(cls, path: Path, code: int, needed: int | None, written: int = 0) -> DiskFull:
        """The message for ``path``: ``needed`` bytes (None: unknown until done, ``written`` so far)."""
        need = f"{needed} bytes" if needed is not None else f"more than {written} bytes"
        failed = cls(
            f"cannot write {path}: {WHY_FULL[code]} (it needs {need}, {free_bytes(path)} bytes are free there); "
            f"free some space or write to another disk, then rerun; nothing was written under that name"
        )
        failed.what = (path, code, needed, written)
        return failed

    def measured_again(self) -> DiskFull:
        """The same failure with the bytes free now (after an enclosing write removed its temporary file too)."""
        return DiskFull.of(*self.what) if self.what else self


def free_bytes(path: Path) -> int | str:
    """The bytes this process may still write on ``path``'s disk (its nearest existing folder's); '?' when the
    disk cannot be asked."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return "?"
    return st.f_bavail * st.f_frsize


def is_full(exc: BaseException) -> bool:
    """``exc`` is a full disk's or an exceeded quota's error."""
    return isinstance(exc, OSError) and exc.errno in FULL


@contextlib.contextmanager
def room_for(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """A block that writes ``path`` in place (an append to a journal or log): a full disk in it becomes
    :class:`DiskFull` naming ``path``. Writes of whole files go through :func:`temp_beside`, which does this too."""
    try:
        yield
    except OSError as exc:
        if not is_full(exc):
            raise
        raise DiskFull.of(Path(path), exc.errno, needed) from None


def append_whole(fd: int, name: str | Path, data: bytes) -> None:
    """``data`` appended to the open file ``fd`` (the file ``name``), unbuffered, so a kill loses at most what is
    being written; a full disk cuts the part it wrote off again (the next append starts where this one did) and is
    :class:`DiskFull` naming ``name``."""
    size = os.fstat(fd).st_size
    try:
        with room_for(name, len(data)):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    except DiskFull:
        os.ftruncate(fd, size)
        raise


@contextlib.contextmanager
def temp_beside(path: str | Path, suffix: str = ".tmp", needed: int | None = None, prefix: str = "") -> Iterator[Path]:
    """A new empty file beside ``path`` (:func:`fresh_tmp`) for the block to fill and rename onto its name;
    removed again when the block fails, so a failed write leaves nothing behind. A full disk in the block is
    :class:`DiskFull` naming ``path``, with ``needed`` (the bytes the write needs, when the caller knows them).
    ``prefix``: put before the temporary file's name (``.``: hidden from those who list ``path``'s kind)."""
    path = Path(path)
    with room_for(path, needed):
        tmp, fd = fresh_tmp(path, suffix, prefix)
        os.close(fd)
    try:
        yield tmp
    except BaseException as exc:
        written = tmp.stat().st_size if tmp.exists() else 0
        tmp.unlink(missing_ok=True)
        if is_full(exc):
            raise DiskFull.of(path, exc.errno, needed, written) from None
        if isinstance(exc, DiskFull):  # a write inside this one's: the bytes free now that both are removed
            raise exc.measured_again() from None
        raise


def fresh_tmp(path: str | Path, suffix: str = ".tmp", prefix: str = "") -> tuple[Path, int]:
    """A new file beside ``path`` (``<prefix><name>.<random><suffix>``, created exclusively: never one that was there)
    and its open descriptor, for the caller to write and rename over ``path`` or remove; its mode is the
    umask's, as a plain write's would be."""
    path = Path(path)
    while True:
        tmp = path.with_name(f"{prefix}{path.name}.{secrets.token_hex(4)}{suffix}")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def check_output_file(path: str | Path, flag: str, example: str = "") -> Path:
    """``path`` as a file a command will write at its end, checked before it starts: not a folder (a trailing
    slash included), and its folder there or makeable. Returns it; ClipflowError naming ``flag`` otherwise.
    ``example``: a file name to suggest inside the folder given by mistake."""
    shown = str(path)
    path = Path(path)
    if shown.endswith(("/", os.sep)) or path.is_dir():
        hint = f" (e.g. {flag} {path / example})" if example else ""
        raise ClipflowError(f"{flag} {shown} is a folder, but {flag} names the file to write: give a file path{hint}")
    _check_makeable(path.parent, flag, shown)
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """``path`` as a folder a command will write into, checked before it starts: not a file, and there or
    makeable. Returns it; ClipflowError naming ``flag`` otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ClipflowError(f"{flag} {path} is a file, not a folder: name a folder (it is made when missing)")
    _check_makeable(path, flag, str(path))
    return path


def _check_makeable(folder: Path, flag: str, shown: str) -> None:
    """``folder`` exists or can be made: its nearest existing ancestor is a folder this process may write in."""
    target = ancestor = folder.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ClipflowError(
            f"{flag} {shown}: {ancestor} is a file, so the folder {folder} cannot be made; name a path under a folder"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        where = f"write in the folder {folder}" if ancestor == target else f"make the folder {folder} in {ancestor}"
        raise ClipflowError(f"{flag} {shown}: no permission to {where}; name a folder you can write in")
