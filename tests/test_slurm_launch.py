"""The slurm launcher run for real inside a Slurm allocation (tests/slurm_cluster.py): roles as srun steps on the
allocated nodes, their output prefixed and logged per role, the first failure ending every step, scancel ending
everything on every node."""

from __future__ import annotations

import json

import pytest
from slurm_helpers import sbatch, three_splits, train_script

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]


def test_the_tiny_recipe_trains_across_three_nodes_as_srun_steps(slurm, tmp_path, tiny_videos):
    script = train_script(tmp_path, tiny_videos, three_splits(tmp_path, tiny_videos))
    job = sbatch(slurm, script)
    info = slurm.wait_job(job, 300)
    out = (tmp_path / "job.out").read_text()
    print(out)
    assert info["JobState"] == "COMPLETED", out
    assert (tmp_path / "model.pt").exists()
    slurm.wait_quiet()
