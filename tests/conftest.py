"""Shared fixtures: a small synthetic video set made once per test session, a small CIFAR-format set per module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("CLIPFLOW_NO_PROGRESS", "1")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_videos(tmp_path_factory) -> Path:
    """16 train and 8 val videos of the synthetic set, 24-40 frames each."""
    from clipflow.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("synthetic")
    generate(out, SyntheticSpec(num_train=16, num_val=8, min_frames=24, max_frames=40, short_side=64), workers=2)
    return out


@pytest.fixture(scope="module")
def small_cifar(tmp_path_factory) -> Path:
    """A synthetic cifar-10-batches-py folder (batches/: 60 train, 20 val images) with lists/ from index_cifar."""
    from cifar_helpers import NUM_TRAIN, NUM_VAL

    from clipflow.data.cifar.index import index_cifar
    from clipflow.data.cifar.synthetic import make_synthetic_cifar

    root = tmp_path_factory.mktemp("cifar")
    make_synthetic_cifar(root / "batches", NUM_TRAIN, NUM_VAL, seed=5)
    index_cifar(root / "batches", root / "lists")
    return root


def copy_workflow(work: Path) -> Path:
    """A copy of the workflow (Snakefile, config, rules, recipes) in ``work``, for a real Snakemake run there."""
    for name in ("Snakefile", "config.yaml", "environment.yml", "workflow", "recipes"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    (work / "profiles").symlink_to("workflow/profiles")
    return work


def clipflow(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` with :func:`python_env`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "clipflow", *args], env=python_env(), capture_output=True, text=True, timeout=timeout
    )


def python_env() -> dict[str, str]:
    """Environment for subprocesses: this interpreter's venv first on PATH, progress bars off."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["CLIPFLOW_NO_PROGRESS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env
