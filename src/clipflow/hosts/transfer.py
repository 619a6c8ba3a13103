"""Single files between this machine and a host's own disk, each copy checked against the sha256 its writer
recorded beside it (``<file>.sha256``, :mod:`clipflow.checksums`)."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from clipflow.checksums import SUFFIX, checksum_path, parse_checksum, sha256_of
from clipflow.errors import ClipflowError
from clipflow.files import temp_beside, write_text_atomic


def recorded_sha256(where, remote: str) -> str:
    """The sha256 that ``remote``'s writer recorded beside it on ``where``'s host; ClipflowError naming the host
    and the file when the file is missing, has no checksum (its writer did not finish) or one that cannot be
    read."""
    shown = f"host {where.host}: {where.shown(remote)}"
    if not where.exists(remote):
        raise ClipflowError(f"{shown}: missing")
    if not where.exists(remote + SUFFIX):
        raise ClipflowError(
            f"{shown}: no checksum {posixpath.basename(remote)}{SUFFIX} beside it: its writer did not finish "
            "(killed?) or it was not written by this clipflow"
        )
    try:
        return parse_checksum(where.read_text(remote + SUFFIX), posixpath.basename(remote))
    except (OSError, ValueError) as exc:
        raise ClipflowError(f"{shown}{SUFFIX}: unreadable checksum ({exc})") from None


def fetch_checked(where, remote: str, local: str | Path, checksum_beside: bool = True) -> str:
    """``remote`` on ``where``'s host copied to ``local`` (atomically; with its ``.sha256`` unless not
    ``checksum_beside``) when the copy's sha256 is the recorded one; the digest. ClipflowError naming the host
    and the file otherwise, ``local`` untouched; an OSError of the copy itself goes up as it is."""
    local = Path(local)
    recorded = recorded_sha256(where, remote)
    local.parent.mkdir(parents=True, exist_ok=True)
    with temp_beside(local, needed=where.size(remote)) as tmp:
        where.copy(remote, tmp)
        got = sha256_of(tmp)
        if got != recorded:
            raise ClipflowError(
                f"host {where.host}: {where.shown(remote)}: sha256 recorded {recorded[:12]}... but the copy has "
                f"{got[:12]}...: damaged on the host or in transit"
            )
        checksum_path(local).unlink(missing_ok=True)
        os.replace(tmp, local)
    if checksum_beside:
        write_text_atomic(checksum_path(local), f"{got}  {local.name}\n")
    return got


def push_checked(where, local: str | Path, remote: str) -> None:
    """``local`` (and its ``.sha256`` when it has one) put on ``where``'s host at ``remote``; the copy's size is
    checked there (SFTP runs over ssh, whose transport is checked already)."""
    local = Path(local)
    sidecar = checksum_path(local)
    if sidecar.exists():
        where.remove(remote + SUFFIX)  # never an old checksum beside the new file
    where.put(local, remote)
    if where.size(remote) != local.stat().st_size:
        raise ClipflowError(f"{where.host}: {where.shown(remote)}: the copy of {local} is incomplete")
    if sidecar.exists():
        where.put(sidecar, remote + SUFFIX)
