"""Virtual environments of reference libraries (a requirements file each: GluonCV and MXNet, say) that tests compare
clipflow with, built once and kept under ``<cache>/clipflow-tests/<name>-<key>``.

:func:`reference_python` makes one with ``python -m venv`` and ``pip install -r`` the file (the package index must be
reachable), the key a hash of the file and this Python's version, so a later session reuses it. It is built in a
temporary folder beside its place and moved there only once ``check`` runs in it, so a half-built one is never taken
for a built one. Where it cannot be built, :class:`ReferenceUnavailable` says why (pip's last lines), and the tests
that need it skip with that reason.

A torch project's reference (PySlowFast, PyTorchVideo) is built with ``see_torch``: its file lists every package it
needs but torch and its kin (installed with ``--no-deps``), and a ``.pth`` file appends this interpreter's
site-packages to the new environment's path, so no second torch is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path


class ReferenceUnavailable(Exception):
    """The reference environment could not be built or checked here: the reason."""


def env_dir(requirements: Path, seen: str = "") -> Path:
    """Where the environment of ``requirements`` lives: ``<cache>/clipflow-tests/<name>-<key>``, the name the file's
    stem without ``-requirements``, the key a hash of the file, this Python's version and ``seen`` (the
    site-packages a ``see_torch`` environment reads)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode() + seen.encode()).hexdigest()[:16]
    name = requirements.stem.removesuffix("-requirements").removesuffix("_requirements")
    return cache / "clipflow-tests" / f"{name}-{key}"


def run_checked(argv: list[str], what: str, timeout: float, env: dict[str, str] | None = None) -> str:
    """``argv``'s standard output; ReferenceUnavailable with ``what`` and the last lines of its output when it fails
    or outlasts ``timeout`` seconds."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ReferenceUnavailable(f"{what} took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise ReferenceUnavailable(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout.strip()


def reference_python(requirements: Path, check: str, see_torch: bool = False) -> Path:
    """The Python of the environment of ``requirements``, built first if need be; ``check`` is code that must run
    there (the imports the reference script needs). ``see_torch``: the environment reads this interpreter's
    site-packages after its own (torch), and the file's packages install without their dependencies.
    ReferenceUnavailable when it cannot be built or checked."""
    seen = sysconfig.get_paths()["purelib"] if see_torch else ""
    target = env_dir(requirements, seen)
    python = target / "bin" / "python"
    if python.is_file():
        run_checked([str(python), "-c", check], f"the check in {target}", 300)
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.building-", dir=target.parent))
    try:
        # only the venv's console scripts name its folder; the tests run its bin/python, which finds its
        # environment wherever the folder is, so building it aside and moving it is safe
        run_checked([sys.executable, "-m", "venv", str(building)], "python -m venv", 300)
        pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        if seen:
            purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            own = run_checked([str(building / "bin" / "python"), "-c", purelib], "the new environment's path", 60)
            Path(own, "clipflow-torch.pth").write_text(seen + "\n")
            pip.append("--no-deps")
        run_checked([*pip, "-r", str(requirements)], f"pip install -r {requirements.name}", 1800)
        run_checked([str(building / "bin" / "python"), "-c", check], f"the check of {requirements.name}", 300)
        try:
            building.rename(target)
        except OSError:  # another session built it at the same time: use theirs
            if not python.is_file():
                raise
        run_checked([str(python), "-c", check], f"the check in {target}", 300)
        return python
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
