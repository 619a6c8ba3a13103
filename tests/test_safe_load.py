"""Torch files load with weights only: a pickle that would run code is refused naming it (issue 30, point 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safety_helpers import code_running_checkpoint

from clipflow.errors import ClipflowError
from clipflow.safe_load import load_weights_only


def test_a_file_whose_pickle_would_run_code_is_refused_and_nothing_runs(tmp_path):
    evil = code_running_checkpoint(tmp_path / "model.pt", tmp_path / "ran")
    with pytest.raises(ClipflowError) as err:
        load_weights_only(evil, "model file")
    assert str(err.value) == (
        f"model file {evil}: its pickle asks for exec, which no file clipflow writes holds (loading it could run "
        "code): not loaded; use a file clipflow wrote, or, if you trust this one, load it yourself and save its "
        "tensors again with torch.save"
    )
    assert not (tmp_path / "ran").exists()
    torch.load(evil, weights_only=False)  # the file is what it claims: an unrestricted load runs its code
    assert (tmp_path / "ran").read_text() == "ran"


def test_a_checkpoint_of_an_earlier_clipflow_with_a_numpy_rng_state_loads(tmp_path):
    np.random.seed(5)
    state = {"model": {"w": torch.ones(2)}, "rng": {"numpy": np.random.get_state(), "torch": torch.get_rng_state()}}
    torch.save(state, tmp_path / "epoch_0001.pt")
    loaded = load_weights_only(tmp_path / "epoch_0001.pt", "checkpoint")
    np.random.set_state(loaded["rng"]["numpy"])
    assert np.random.rand() == (np.random.seed(5), np.random.rand())[1]
    assert torch.equal(loaded["model"]["w"], torch.ones(2))
