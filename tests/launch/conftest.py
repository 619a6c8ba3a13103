"""The launcher tests' fixture: mx_python, a Python with a real MXNet for ps-lite jobs (test_mxnet, test_slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).with_name("mxnet-requirements.txt")
# the ps-lite jobs need MXNet's distributed kvstore: a wheel built without it is no environment for them
CHECK = "import mxnet; assert mxnet.runtime.Features().is_enabled('DIST_KVSTORE'), 'MXNet without DIST_KVSTORE'"


@pytest.fixture(scope="session")
def mx_python() -> Path:
    """The Python of a virtual environment with MXNet 1.9.1 (tests/reference_envs.py, built once and cached); skips,
    saying why, only where it cannot be built."""
    from reference_envs import ReferenceUnavailable, reference_python

    try:
        return reference_python(REQUIREMENTS, CHECK)
    except ReferenceUnavailable as exc:
        pytest.skip(f"no MXNet environment to run a real ps-lite job: {exc}")
