"""`clipflow status`: what it says of a run in progress and of a finished one is in tests/train/test_launch.py (a
real killed and resumed run); here, the runs it cannot read, named, and runs the launcher stopped (records built
by hand)."""

from __future__ import annotations

import json
import os

import pytest

from clipflow.errors import ClipflowError
from clipflow.evaluate.status import run_status


def make_run(results, run="tiny", lines=None):
    folder = results / run / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"recipe": "r", "epochs": 4, "iters_per_epoch": 2, "workers": 2,
                                                 "global_batch": 4, "backend": "ps"}))  # fmt: skip
    (folder / "metrics.jsonl").write_text("\n".join(lines or []) + "\n")
    return folder


def test_eta_is_the_epochs_left_at_the_mean_of_the_last_three(tmp_path):
    times = [10.0, 20.0, 30.0, 40.0]
    lines = [json.dumps({"epoch": e, "epoch_time": t, "clips_per_s": 5.0 * e}) for e, t in enumerate(times[:3], 1)]
    make_run(tmp_path / "results", lines=lines)
    got = run_status(tmp_path / "results", "tiny")
    assert (got.epoch, got.epochs, got.clips_per_s, got.finished) == (3, 4, 15.0, False)
    assert got.eta_s == pytest.approx(1 * (10 + 20 + 30) / 3) and got.last_checkpoint is None
    assert "ETA: 0 min 20 s" in got.lines() and "last checkpoint: none yet" in got.lines()


@pytest.mark.parametrize(
    "setup, message",
    [
        ("missing", "no run 'tiny' in {results}/ (runs with checkpoints: other)"),
        ("not_started", "run 'tiny' has not started training: no {results}/tiny/checkpoints/run.json"),
        ("bad_line", "metrics.jsonl line 2 is not a metrics record (epoch, epoch_time, clips_per_s)"),
        ("not_json", "metrics.jsonl line 1 is not JSON"),
    ],
)
def test_a_run_it_cannot_read_is_named(tmp_path, setup, message):
    results = tmp_path / "results"
    make_run(results, run="other")
    if setup == "not_started":
        (results / "tiny" / "checkpoints").mkdir(parents=True)
    elif setup == "bad_line":
        make_run(results, lines=[json.dumps({"epoch": 1, "epoch_time": 3.0, "clips_per_s": 2.0}), '{"epoch": "two"}'])
    elif setup == "not_json":
        make_run(results, lines=["{epoch: 1"])
    with pytest.raises(ClipflowError) as err:
        run_status(results, "tiny")
    assert message.format(results=results) in str(err.value)


def test_a_cut_last_line_of_the_history_is_left_out_with_a_note(tmp_path, capsys):
    lines = [json.dumps({"epoch": e, "epoch_time": 10.0, "clips_per_s": 4.0}) for e in (1, 2)]
    folder = make_run(tmp_path / "results", lines=lines)
    with (folder / "metrics.jsonl").open("a") as fh:
        fh.write('{"epoch": 3, "epoch_ti')
    got = run_status(tmp_path / "results", "tiny")
    assert (got.epoch, got.clips_per_s) == (2, 4.0)
    assert capsys.readouterr().err == (
        f"clipflow: note: {folder / 'metrics.jsonl'} line 3 is cut short (22 bytes without a newline, from a write "
        "that was stopped): left out; the next write to the record sets it aside beside it\n"
    )


def stopped_run(results, code, cause):
    """A run whose launcher stopped at 1_700_000_100 (2023-11-14 22:15:00 UTC), after its files were written."""
    lines = [json.dumps({"epoch": e, "epoch_time": 10.0, "clips_per_s": 4.0}) for e in (1, 2)]
    folder = make_run(results, lines=lines)
    (folder / "epoch_0003_iter_000002.pt").write_bytes(b"")
    attempt = {"launch": 1_699_999_000.0, "attempt": 1, "started": 1_699_999_000.0, "ended": 1_700_000_100.0,
               "code": code, "cause": cause, "hosts": ["localhost"], "workers": 2, "resumed_from": None,
               "lost_s": 0.0}  # fmt: skip
    (folder / "restarts.jsonl").write_text(json.dumps(attempt) + "\n")
    for path in folder.iterdir():
        if path.name != "restarts.jsonl":
            os.utime(path, (1_700_000_000, 1_700_000_000))
    return folder


def test_a_run_the_launcher_stopped_says_when_and_how_far_it_got_and_has_no_eta(tmp_path):
    folder = stopped_run(tmp_path / "results", 130, "the launcher got SIGINT")
    got = run_status(tmp_path / "results", "tiny")
    assert (got.epoch, got.finished, got.eta_s, got.stopped_at) == (2, False, None, 1_700_000_100.0)
    assert got.lines() == [
        "run tiny: r",
        "epoch 2/4",
        "last checkpoint: epoch_0003_iter_000002.pt",
        "stopped: at 2023-11-14 22:15:00 UTC, after epoch 2/4 (the launcher got SIGINT, exit 130); rerun the train "
        "stage to resume from epoch_0003_iter_000002.pt",
        "throughput: 4.0 clips/s",
        "ETA: none, not training",
        "best val top-1: none yet",
        f"read from: {folder}",
    ]
    os.utime(folder / "run.json")  # a later launch's trainer started: training again, with an ETA
    again = run_status(tmp_path / "results", "tiny")
    assert (again.stopped_at, again.stop_cause, again.eta_s) == (None, "", 2 * 10.0)
    assert "ETA: 0 min 20 s" in again.lines() and not [line for line in again.lines() if "stopped" in line]


def test_a_run_whose_last_attempt_succeeded_or_is_still_going_is_not_stopped(tmp_path):
    stopped_run(tmp_path / "results", 0, "")  # code 0: the launch succeeded (the epochs decide whether it is done)
    assert run_status(tmp_path / "results", "tiny").stopped_at is None
    other = tmp_path / "other"
    folder = stopped_run(other, 1, "worker 1 on localhost failed (exit 1)")
    (folder / "restarts.jsonl").unlink()  # no launcher record (a worker run by hand): as before, an ETA
    assert run_status(other, "tiny").eta_s == 2 * 10.0
