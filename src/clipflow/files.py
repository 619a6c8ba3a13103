"""Small file helpers the stages share: atomic writes and the checks on
an output path that a command makes before it starts its work.

An atomic write goes through a temporary file of a fresh name beside the target (made with O_EXCL, so it is
never a file someone else had there) that is removed again on any failure: a failed write leaves the old file
and nothing else. The output checks refuse, with one message naming the flag, the path and the way out, a file
path that is a folder, a folder path that is a file, and a path whose folder cannot be made, so that a command
fails on them before hours of work rather than after.

The append-only JSON-lines records (journals included) are :mod:`clipflow.jsonl`'s.
"""

from __future__ import annotations

import contextlib
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
    raised: nothing is left behind, and no file that was there before is touched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():  # os.replace would fail only after the data was written
        raise IsADirectoryError(21, "Is a directory", str(path))
    with temp_beside(path) as tmp:
        tmp.write_bytes(data)
        os.replace(tmp, path)


@contextlib.contextmanager
def temp_beside(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A new empty file beside ``path`` (:func:`fresh_tmp`) for the block to fill and rename onto its name;
    removed again when the block fails, so a failed write leaves nothing behind."""
    tmp, fd = fresh_tmp(path, suffix)
    os.close(fd)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fresh_tmp(path: str | Path, suffix: str = ".tmp") -> tuple[Path, int]:
    """A new file beside ``path`` (``<name>.<random><suffix>``, created exclusively: never one that was there)
    and its open descriptor, for the caller to write and rename over ``path`` or remove; its mode is the
    umask's, as a plain write's would be."""
    path = Path(path)
    while True:
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}{suffix}")
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
