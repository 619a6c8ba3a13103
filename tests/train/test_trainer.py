"""The trainer's history, metrics.jsonl beside the checkpoints (Trainer._append_history): an epoch's record goes on
a line of its own after a cut last line is set aside, and the lines an interrupted run wrote after the checkpoint it
resumed from are dropped. Training itself is tested through the launcher (tests/train/test_launch.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from clipflow.errors import ClipflowError
from clipflow.train.checkpoint import HISTORY, CheckpointStore
from clipflow.train.trainer import Trainer


def history_of(folder, text: bytes) -> SimpleNamespace:
    """Rank 0's trainer as far as its history goes: its store, its history file holding ``text`` (recorded as
    the run's) and its log."""
    store = CheckpointStore(folder)
    store.put(HISTORY, lambda path: path.write_bytes(text))
    return SimpleNamespace(store=store, history_path=folder / HISTORY, said=[], log=None)


def test_an_epoch_goes_on_its_own_line_after_a_cut_one_set_aside_and_later_epochs_dropped(tmp_path):
    lines = [json.dumps({"epoch": e, "loss": 3.0 - e}) for e in (1, 2, 3)]
    cut = b'{"epoch": 4, "loss": -'
    trainer = history_of(tmp_path, "\n".join(lines).encode() + b"\n" + cut)
    trainer.log = trainer.said.append

    Trainer._append_history(trainer, {"epoch": 3, "loss": 0.25}, 2)  # resumed from epoch 2's checkpoint

    assert trainer.history_path.read_text().splitlines() == [*lines[:2], json.dumps({"epoch": 3, "loss": 0.25})]
    assert (tmp_path / "metrics.jsonl.cut-1").read_bytes() == cut
    assert len(trainer.said) == 1 and trainer.said[0].startswith(f"clipflow: {trainer.history_path} ended in a line")


def test_a_whole_line_without_an_epoch_is_named(tmp_path):
    trainer = history_of(tmp_path, b'{"epoch": 1}\n{"loss": 2}\n')
    trainer.log = trainer.said.append
    with pytest.raises(ClipflowError) as err:
        Trainer._append_history(trainer, {"epoch": 2}, 1)
    assert str(err.value) == (
        f"training history {trainer.history_path} line 2 has no epoch number; expected one JSON object an epoch, "
        "as the trainer writes metrics.jsonl: move the file away to start the history afresh"
    )


def test_a_history_that_is_not_the_runs_is_moved_aside_unread(tmp_path):
    said: list[str] = []
    (tmp_path / HISTORY).write_text("my own notes on this run\n")  # not recorded: someone else's file
    trainer = SimpleNamespace(store=CheckpointStore(tmp_path, log=said.append), history_path=tmp_path / HISTORY,
                              log=said.append)  # fmt: skip
    Trainer._append_history(trainer, {"epoch": 1, "loss": 2.5}, 0)
    assert trainer.history_path.read_text() == json.dumps({"epoch": 1, "loss": 2.5}) + "\n"
    (aside,) = tmp_path.glob(f"{HISTORY}.not-clipflow-*")
    assert aside.read_text() == "my own notes on this run\n"
    assert said == [f"{trainer.history_path}: not a file clipflow wrote for this run, and the run writes one of that "
                    f"name now: moved to {aside.name} beside it, not replaced"]  # fmt: skip
