"""`train.init_from` (fine-tuning): a finished tiny run's model starts a run with another number of classes; what
was loaded, what was made afresh, in the log and in run.json; a file that does not fit refused before any worker
starts, naming the setting."""

from __future__ import annotations

import json

import pytest
import torch
from launch_helpers import TINY, launch, two_splits
from safety_helpers import code_running_checkpoint

from clipflow.errors import ClipflowError
from clipflow.models.builder import build_model
from clipflow.recipe import load_recipe
from clipflow.train.init_from import check_init_from, start_from

MORE_CLASSES = 11  # the tiny recipe has 8
HEAD = ["head.weight", "head.bias"]


def fine_tune(model_file, classes: int = MORE_CLASSES) -> dict:
    return {**TINY, "model": {"num_classes": classes}, "train": {**TINY["train"], "init_from": str(model_file)}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_videos):
    """A finished 1-epoch run of the tiny recipe on 2 workers: its folder (model.pt in it)."""
    work = tmp_path_factory.mktemp("finished")
    done = launch(work, tiny_videos, two_splits(work, tiny_videos))
    assert done.returncode == 0, done.stdout + done.stderr
    return work


def test_a_finished_model_starts_a_run_of_other_classes_all_but_the_classifier_equal_at_step_0(
    tmp_path, tiny_videos, finished
):
    trained = torch.load(finished / "model.pt", weights_only=True)["model"]
    recipe = load_recipe("slowfast_tiny_synthetic", fine_tune(finished / "model.pt"))
    # step 0 as the trainer makes it: the network built from the seed, then the file loaded into it
    torch.manual_seed(0)
    model = build_model(recipe["model"])
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    lines: list[str] = []
    record = start_from(model, recipe, lines.append)
    state = model.state_dict()
    for key, tensor in state.items():
        if key in HEAD:
            assert torch.equal(tensor, fresh[key]) and tensor.shape[0] == MORE_CLASSES, key
        else:
            assert torch.equal(tensor, trained[key]), key
    assert record["initialised"] == HEAD and record["unused"] == []
    assert record["loaded"] == [k for k in state if k not in HEAD]
    assert lines[0].startswith(f"train.init_from: {len(state) - 2} of {len(state)} tensors loaded from "
                               f"{finished / 'model.pt'} (a clipflow model, sha256 ")  # fmt: skip
    assert lines[1:] == ["train.init_from: initialised afresh (not in the file, or another shape there): "
                         "head.weight, head.bias"]  # fmt: skip

    # the real run prints the same lines and keeps the lists in run.json
    done = launch(tmp_path, tiny_videos, two_splits(tmp_path, tiny_videos), overrides=fine_tune(finished / "model.pt"))
    assert done.returncode == 0, done.stdout + done.stderr
    for line in lines:
        assert line.split(" (a clipflow")[0] in done.stdout
    facts = json.loads((tmp_path / "ckpt" / "run.json").read_text())["init_from"]
    assert {k: facts[k] for k in ("loaded", "initialised", "unused")} == {
        k: record[k] for k in ("loaded", "initialised", "unused")
    }
    assert facts["sha256"] == record["sha256"] and facts["file"] == str(finished / "model.pt")
    final = torch.load(tmp_path / "model.pt", weights_only=True)
    assert final["model"]["head.weight"].shape[0] == MORE_CLASSES


def test_a_file_that_does_not_fit_is_refused_before_any_worker_starts(tmp_path, tiny_videos, finished, capsys):
    splits = two_splits(tmp_path, tiny_videos)
    other = tmp_path / "r3d.pt"
    torch.save({"model": {}, "recipe": {"model": {"name": "r3d_18", "num_classes": 8}}}, other)
    wider = tmp_path / "wider.pt"
    recipe = load_recipe("slowfast_tiny_synthetic", {"model": {"width": 32}})
    torch.save({"model": {}, "recipe": recipe}, wider)
    code = code_running_checkpoint(tmp_path / "code.pt", tmp_path / "ran")
    cases = [
        (tmp_path / "gone.pt", f"train.init_from {tmp_path / 'gone.pt'} does not exist"),
        (other, f"train.init_from {other} holds a r3d_18 model, but the recipe's model.name is slowfast; set "
                "model.name: r3d_18 or give weights of slowfast"),
        (wider, f"train.init_from {wider} was made with model.width 32, the recipe has 16; set model.width: 32 to "
                "start from these weights"),
        (code, f"train.init_from {code}: its pickle asks for exec, which no file clipflow writes holds"),
    ]  # fmt: skip
    for path, message in cases:  # the check the launch makes, in this process
        recipe = load_recipe("slowfast_tiny_synthetic", fine_tune(path, classes=8))
        with pytest.raises(ClipflowError) as refused:
            check_init_from(recipe)
        assert message in str(refused.value)
    assert not (tmp_path / "ran").exists()
    # and the launch makes it before any worker starts
    done = launch(tmp_path, tiny_videos, splits, overrides=fine_tune(wider), here=capsys)
    assert done.returncode == 2 and cases[2][1] in done.stderr, done.stderr
    assert not (tmp_path / "logs" / "worker-0.log").exists()


def test_start_from_names_a_truncated_file(tmp_path, finished):
    cut = tmp_path / "cut.pt"
    cut.write_bytes((finished / "model.pt").read_bytes()[:5000])
    recipe = load_recipe("slowfast_tiny_synthetic", fine_tune(cut))
    with pytest.raises(ClipflowError, match=rf"train.init_from {cut} (cannot be loaded|is damaged)"):
        start_from(build_model(recipe["model"]), recipe)
