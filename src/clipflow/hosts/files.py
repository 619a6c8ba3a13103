"""One host's files: by plain file access (local and Slurm plans: this machine, or storage the nodes share) or
over SFTP with the job's key and the pinned host keys (ssh plans, which can also be written: :meth:`SftpFiles.put`).

Paths are as the roles used them: absolute, ``~/``-relative, or relative to the roles' working folder there.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import parse_host
from clipflow.hosts.plan import Plan
from clipflow.hosts.ssh import connect


class LocalFiles:
    def __init__(self, host: str, workdir: Path) -> None:
        self.host = host
        self.workdir = workdir

    def _path(self, path: str) -> Path:
        return self.workdir / os.path.expanduser(path)

    def shown(self, path: str) -> str:
        return path

    def exists(self, path: str) -> bool:
        return self._path(path).is_file()

    def read_text(self, path: str) -> str:
        return self._path(path).read_text(encoding="utf-8", errors="replace")

    def subfolders(self, folder: str) -> list[str]:
        where = self._path(folder)
        return sorted(p.name for p in where.iterdir() if p.is_dir()) if where.is_dir() else []

    def names(self, folder: str) -> list[str]:
        where = self._path(folder)
        return sorted(p.name for p in where.iterdir()) if where.is_dir() else []

    def mtime(self, path: str) -> float:
        return self._path(path).stat().st_mtime

    def copy(self, path: str, local: Path) -> None:
        shutil.copyfile(self._path(path), local)

    def size(self, path: str) -> int:
        return self._path(path).stat().st_size

    def close(self) -> None:
        pass


class SftpFiles:
    """A host of an ssh plan; relative paths are under the plan's working folder there (SFTP starts at home)."""

    def __init__(self, plan: Plan, host: str, workdir: str = "") -> None:
        self.host = host
        self.conn = connect(parse_host(host, "the plan's hosts"), plan.ssh_settings())
        try:
            self.sftp = self.conn.sftp()
        except Exception as exc:  # paramiko's SSHException, EOFError: the server refused or dropped SFTP
            self.conn.close()
            raise ClipflowError(f"{host}: no SFTP session ({exc or type(exc).__name__})") from None
        self.workdir = workdir or plan.workdir or "."

    def _path(self, path: str) -> str:
        if not (path.startswith("/") or path == "~" or path.startswith("~/")):
            path = posixpath.join(self.workdir, path)
        if path == "~" or path.startswith("~/"):
            path = "." + path[1:]  # SFTP's relative paths start at the user's home
        return path

    def shown(self, path: str) -> str:
        if path.startswith("/") or path.startswith("~"):
            return path
        return posixpath.join(self.workdir, path)

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(self._path(path))
        except OSError:
            return False
        return True

    def read_text(self, path: str) -> str:
        with self.sftp.open(self._path(path), "r") as fh:
            return fh.read().decode("utf-8", errors="replace")

    def subfolders(self, folder: str) -> list[str]:
        try:
            entries = self.sftp.listdir_attr(self._path(folder))
        except OSError:
            return []
        return sorted(e.filename for e in entries if stat.S_ISDIR(e.st_mode or 0))

    def names(self, folder: str) -> list[str]:
        try:
            return sorted(self.sftp.listdir(self._path(folder)))
        except OSError:
            return []

    def mtime(self, path: str) -> float:
        return float(self.sftp.stat(self._path(path)).st_mtime or 0)

    def copy(self, path: str, local: Path) -> None:
        self.sftp.get(self._path(path), str(local))

    def size(self, path: str) -> int:
        return int(self.sftp.stat(self._path(path)).st_size or 0)

    def chmod(self, path: str, mode: int) -> None:
        self.sftp.chmod(self._path(path), mode)

    def remove(self, path: str) -> None:
        """``path`` removed there when it is there."""
        try:
            self.sftp.remove(self._path(path))
        except OSError:
            pass

    def makedirs(self, folder: str) -> None:
        """``folder`` and its parents made there when missing."""
        self._makedirs(self._path(folder))

    def _makedirs(self, path: str) -> None:
        prefix, parts = ("/" if path.startswith("/") else ""), []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            parts.append(part)
            current = prefix + "/".join(parts)
            try:
                self.sftp.stat(current)
            except OSError:
                self.sftp.mkdir(current)

    def put(self, local: Path, path: str) -> None:
        """``local`` copied to ``path`` there: under a temporary name, then renamed over it (a reader sees the old
        file or the whole new one); the folder is made when missing."""
        target = self._path(path)
        folder, name = posixpath.split(target)
        self._makedirs(folder or ".")
        temp = posixpath.join(folder, f".{name}.clipflow-put")
        self.sftp.put(str(local), temp)
        self.sftp.posix_rename(temp, target)

    def close(self) -> None:
        self.sftp.close()
        self.conn.close()


def open_host(plan: Plan, host: str, workdir: str = "") -> LocalFiles | SftpFiles:
    """The files of ``host`` (a role's host as the plan writes it); ClipflowError naming it when it is unreachable.
    ``workdir``: the roles' working folder there, when not the plan's (a run's folder on a host's own disk)."""
    if plan.launcher == "ssh":
        return SftpFiles(plan, host, workdir)
    return LocalFiles(host, Path.cwd())
