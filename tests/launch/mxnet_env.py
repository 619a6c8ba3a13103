"""A virtual environment with a real MXNet (the versions of tests/launch/mxnet-requirements.txt), built once and kept.

:func:`mxnet_python` makes it with ``python -m venv`` and ``pip install -r`` that file (PyPI must be reachable), in
a folder under the user's cache named for the requirements and this Python's version, so a later session reuses it;
it is built in a temporary folder beside that and moved into place only once MXNet imports, so a half-built one is
never taken for a built one. Where it cannot be built, :class:`MxnetUnavailable` says why (pip's last lines), and
the tests that need it skip with that reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("mxnet-requirements.txt")
CHECK = "import mxnet, numpy; print(mxnet.__version__, mxnet.runtime.Features().is_enabled('DIST_KVSTORE'))"


class MxnetUnavailable(Exception):
    """The MXNet environment could not be built here (no network to PyPI, say): the reason."""


def env_dir() -> Path:
    """Where the environment lives: ``<cache>/clipflow-tests/mxnet-<key>``, the key a hash of the requirements
    and this Python's version."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    return cache / "clipflow-tests" / f"mxnet-{key}"


def _run(argv: list[str], what: str, timeout: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MxnetUnavailable(f"{what} took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise MxnetUnavailable(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout.strip()


def mxnet_python() -> Path:
    """The Python of the MXNet environment, built first if need be; MxnetUnavailable when it cannot be."""
    target = env_dir()
    python = target / "bin" / "python"
    if python.is_file():
        _run([str(python), "-c", CHECK], f"MXNet in {target}", 120)
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.building-", dir=target.parent))
    try:
        # only the venv's console scripts name its folder; these tests run its bin/python, which finds its
        # environment wherever the folder is, so building it aside and moving it is safe
        _run([sys.executable, "-m", "venv", str(building)], "python -m venv", 300)
        pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        _run([*pip, "-r", str(REQUIREMENTS)], f"pip install -r {REQUIREMENTS.name}", 1200)
        version, dist = _run([str(building / "bin" / "python"), "-c", CHECK], "import mxnet", 120).split()
        if dist != "True":
            raise MxnetUnavailable(f"MXNet {version} from PyPI was built without DIST_KVSTORE")
        try:
            building.rename(target)
        except OSError:  # another session built it at the same time: use theirs
            shutil.rmtree(building, ignore_errors=True)
        _run([str(python), "-c", CHECK], f"MXNet in {target}", 120)
        return python
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
