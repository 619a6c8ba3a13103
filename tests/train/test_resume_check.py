"""A run resumes whatever changed, or says why not (issue 19, point 1): real launches into one checkpoint folder,
and resume_check's classification on facts dicts without training."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import assert_refused
from launch_helpers import TINY, launch, two_splits
from safety_helpers import code_running_checkpoint

from clipflow.errors import ClipflowError
from clipflow.train.resume_check import check_resume, compare, kind_of, lr_at_resume

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

TWO_EPOCHS = {**TINY, "train": {**TINY["train"], "epochs": 2}}


def with_train(**train) -> dict:
    return {**TINY, "train": {**TINY["train"], **train}}


def listing(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> sha256)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def history_epochs(tmp_path: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (tmp_path / "ckpt" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def finished(tmp_path, tiny_videos):
    """A finished 2-epoch run on 2 workers in tmp_path/ckpt; (tmp_path, splits)."""
    splits = two_splits(tmp_path, tiny_videos, 4)
    done = launch(tmp_path, tiny_videos, splits, overrides=TWO_EPOCHS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("epoch_*.pt")) == ["epoch_0001.pt", "epoch_0002.pt"]
    return tmp_path, splits


def test_more_epochs_after_a_finished_run_continue_at_epoch_3_with_the_lr_shown(finished, tiny_videos):
    tmp_path, splits = finished
    first_model = torch.load(tmp_path / "model.pt", weights_only=False)
    saved = torch.load(tmp_path / "ckpt" / "epoch_0002.pt", weights_only=False)
    assert saved["facts"]["workers"] == 2 and saved["facts"]["global_batch"] == 4 and saved["step"] == 4
    done = launch(tmp_path, tiny_videos, splits, overrides=with_train(epochs=4))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "resume from epoch_0002.pt: train.epochs: 2 -> 4" in out
    assert f"resumed from checkpoint {tmp_path / 'ckpt' / 'epoch_0002.pt'} (epoch 2, step 4)" in out
    # cosine over 2 x 2 iterations at lr 0.01 x 4 / base_batch: step 4 is the old schedule's end (lr 0), the new
    # one's middle (half the peak)
    t = saved["recipe"]["train"]
    peak = t["base_lr"] * 4 / t["base_batch"]
    new_lr = peak * (1 + math.cos(math.pi * 4 / 8)) / 2
    assert f"learning rate at step 4 (the resume point): 0 -> {new_lr:.6g}" in out
    assert history_epochs(tmp_path) == [1, 2, 3, 4]
    assert "epoch 3/4" in out and "epoch 1/4" not in out
    final = torch.load(tmp_path / "model.pt", weights_only=False)
    assert final["epoch"] == 4 and first_model["epoch"] == 2
    assert any(not torch.equal(final["model"][k], first_model["model"][k]) for k in final["model"])


def test_a_changed_model_width_is_refused_and_the_checkpoints_are_untouched(finished, tiny_videos):
    tmp_path, splits = finished
    before = listing(tmp_path / "ckpt")
    wider = {**TWO_EPOCHS, "model": {"width": 8}}
    done = launch(tmp_path, tiny_videos, splits, overrides=wider)
    old_width = torch.load(tmp_path / "ckpt" / "epoch_0002.pt", weights_only=False)["recipe"]["model"]["width"]
    line = assert_refused(done, f"model.width {old_width} -> 8", "train.resume: never", "another name")
    assert "epoch_0002.pt" in line and old_width != 8
    assert listing(tmp_path / "ckpt") == before


def test_resume_never_sets_the_earlier_run_aside_and_starts_afresh(finished, tiny_videos):
    tmp_path, splits = finished
    before = {name: digest for name, digest in listing(tmp_path / "ckpt").items() if not name.startswith(".")}
    done = launch(tmp_path, tiny_videos, splits, "--resume", "never", overrides={**TWO_EPOCHS, "model": {"width": 8}})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    aside = [p for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("set-aside-")]
    assert len(aside) == 1 and f"set aside in {aside[0]}" in out
    moved = listing(aside[0])
    assert {"epoch_0001.pt", "epoch_0002.pt", "metrics.jsonl", "run.json"} <= set(moved)
    assert all(before[name] == digest for name, digest in moved.items())  # moved as they were, none rewritten
    assert "job.json" not in moved and (tmp_path / "ckpt" / "job.json").is_file()
    assert "no checkpoint in" in out and "epoch 1/2" in out
    assert history_epochs(tmp_path) == [1, 2]
    assert torch.load(tmp_path / "ckpt" / "epoch_0002.pt", weights_only=False)["recipe"]["model"]["width"] == 8


def test_checkpoints_none_of_which_loads_are_refused(finished, tiny_videos):
    tmp_path, splits = finished
    for path in (tmp_path / "ckpt").glob("epoch_*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    done = launch(tmp_path, tiny_videos, splits, overrides=TWO_EPOCHS)
    assert_refused(done, "none of its checkpoints loads", "epoch_0001.pt, epoch_0002.pt", "train.resume: never")


def test_an_old_layout_subfolder_is_refused_naming_it(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos, 4)
    old = tmp_path / "ckpt" / "0123456789abcdef"
    old.mkdir(parents=True)
    (old / "epoch_0001.pt").write_bytes(b"an older clipflow's checkpoint")
    done = launch(tmp_path, tiny_videos, splits, overrides=TWO_EPOCHS)
    assert_refused(done, str(old), "move its files up", "train.resume: never")


# -- resume_check on facts dicts, no training -------------------------------------------------------------------


def facts(**changes) -> dict:
    recipe = {"name": "r", "model": {"name": "slowfast", "num_classes": 5, "width": 8},
              "data": {"new_length": 8, "random_flip": True},
              "train": {"epochs": 2, "batch_size": 2, "accumulate": 1, "base_lr": 0.1, "base_batch": 8,
                        "lr_mode": "cosine", "warmup_epochs": 0, "warmup_lr": 0.0, "lr_decay": 0.1,
                        "lr_decay_epoch": [], "optimizer": "sgd", "eval_every": 1}}  # fmt: skip
    top = {"workers": 2, "batch_size": 2, "accumulate": 1, "global_batch": 4, "iters_per_epoch": 5, "seed": 0,
           "backend": "ps", "ps": {"mode": "dist_sync"}, "hosts": ["localhost"], "placement": "beside",
           "train_list_sha256": "a" * 64}  # fmt: skip
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            recipe[section] = {**recipe[section], name: value}
        else:
            top[key] = value
    return {"recipe": recipe, **top}


def test_each_kind_of_change_is_sorted_as_the_table_says():
    assert [kind_of(n) for n in ("train.epochs", "train.eval_every", "data.random_flip", "cluster.hosts",
                                 "train.seed", "train.kvstore", "train.base_lr")] == ["resumes"] * 7  # fmt: skip
    assert [kind_of(n) for n in ("cluster.num_workers", "train.batch_size", "train.accumulate")] == ["resizes"] * 3
    assert [kind_of(n) for n in ("model.width", "model.num_classes", "model.name", "train.optimizer",
                                 "train.multigrid", "training list (sha256)")] == ["refused"] * 6  # fmt: skip
    changes = compare(
        facts(),
        facts(
            train__epochs=4,
            data__random_flip=False,
            workers=3,
            global_batch=6,
            model__width=16,
            train__optimizer="adam",
            train_list_sha256="b" * 64,
        ),
    )
    assert changes.resumes == [("data.random_flip", True, False), ("train.epochs", 2, 4)]
    assert changes.resizes == [("cluster.num_workers", 2, 3), ("global batch", 4, 6)]
    assert changes.refused == [("model.width", 8, 16), ("train.optimizer", "sgd", "adam"),
                               ("training list (sha256)", "a" * 64, "b" * 64)]  # fmt: skip
    assert compare(facts(), facts()) == compare(facts(), {"recipe": facts()["recipe"]})  # what one side lacks: skipped
    assert not compare(facts(), facts()).resumes


def test_the_lr_at_the_resume_point_under_a_longer_cosine_schedule():
    # old: 2 epochs x 5 iterations, lr 0.1 x 4 / 8 = 0.05; at step 6 of 10 and of 20
    old, new = lr_at_resume(facts(), facts(train__epochs=4), 6)
    assert old == pytest.approx(0.05 * (1 + math.cos(math.pi * 6 / 10)) / 2)
    assert new == pytest.approx(0.05 * (1 + math.cos(math.pi * 6 / 20)) / 2) and new > old


def test_a_refusal_is_one_line_naming_every_refused_setting(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    torch.save({"model": {}, "recipe": facts()["recipe"], "facts": facts(), "step": 3}, folder / "epoch_0001.pt")
    with pytest.raises(ClipflowError) as err:
        check_resume(folder, facts(model__num_classes=400, train__optimizer="adam"), "auto", log=lambda _: None)
    message = str(err.value)
    assert "\n" not in message and "model.num_classes 5 -> 400" in message and "train.optimizer sgd -> adam" in message
    said: list[str] = []
    state, path = check_resume(folder, facts(train__eval_every=2), "auto", log=said.append)
    assert path == folder / "epoch_0001.pt" and state["step"] == 3
    assert said == ["clipflow: resume from epoch_0001.pt: train.eval_every: 1 -> 2"]  # the lr does not move


def test_a_checkpoint_whose_pickle_would_run_code_is_refused_and_nothing_runs(tmp_path):
    # the check the launcher and rank 0 make before a run starts
    evil = code_running_checkpoint(tmp_path / "ckpt" / "epoch_0001.pt", tmp_path / "ran")
    with pytest.raises(ClipflowError) as err:
        check_resume(tmp_path / "ckpt", facts(), "auto", log=lambda _: None)
    assert str(err.value) == (
        f"checkpoint {evil}: its pickle asks for exec, which no file clipflow writes holds (loading it could run "
        "code): not loaded; use a file clipflow wrote, or, if you trust this one, load it yourself and save its "
        "tensors again with torch.save"
    )
    assert not (tmp_path / "ran").exists()
