"""The launcher tests' fixture: mx_python, a Python with a real MXNet for ps-lite jobs (test_mxnet, test_slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mx_python() -> Path:
    """The Python of a virtual environment with MXNet 1.9.1 (tests/launch/mxnet_env.py, built once and cached); skips,
    saying why, only where it cannot be built."""
    from mxnet_env import MxnetUnavailable, mxnet_python

    try:
        return mxnet_python()
    except MxnetUnavailable as exc:
        pytest.skip(f"no MXNet environment to run a real ps-lite job: {exc}")
