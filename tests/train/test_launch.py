"""`clipflow train launch` on real processes: a worker that hits bad input ends the run, naming it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from disk_helpers import files_on, full_message
from helpers import free_port, python_env
from launch_helpers import TINY, launch, scanned, scanned_val, two_splits

from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.made import RECORD
from clipflow.train.loader_sizing import LoaderChoice

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)


def status(results, run: str) -> dict:
    """`clipflow status RUN --json`, parsed."""
    done = subprocess.run([sys.executable, "-m", "clipflow", "status", run, "--results", str(results), "--json"],
                          env=python_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_missing_video_in_one_workers_list_ends_the_run_naming_it(tmp_path, tiny_videos):
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    write_list(splits / "worker0.lst", entries[:4])
    write_list(splits / "worker1.lst", [VideoEntry("videos/train/gone.mp4", 1, 30), *entries[4:7]])
    began = time.monotonic()
    done = launch(tmp_path, tiny_videos, splits)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert f"video {tiny_videos}/videos/train/gone.mp4 (listed in {splits}/worker1.lst line 1) does not exist" in out
    assert "worker 1 on localhost failed (exit code 2)" in out
    # what a rerun goes on from, truly (issue 30: it said "resume from the last checkpoint" when none was saved)
    assert done.stderr.splitlines()[-1] == (f"clipflow: error: training failed (exit 2); {tmp_path / 'ckpt'} holds no "
                                            "complete checkpoint, so a rerun starts afresh")  # fmt: skip
    assert time.monotonic() - began < 120
    assert not (tmp_path / "model.pt").exists()


def test_a_worker_whose_checkpoint_finds_the_disk_full_ends_the_run_in_one_line_with_what_a_rerun_does(
    tmp_path, tiny_videos, small_disk
):
    # issue 30: the checkpoint folder on a 64 KiB disk, which the launcher's job file and rank 0's run.json fit on
    # and the first checkpoint (hundreds of KB) does not
    ckpt = small_disk / "ckpt"
    done = launch(tmp_path, tiny_videos, two_splits(tmp_path, tiny_videos), "--checkpoint-root", str(ckpt))
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "worker 0 on localhost failed (exit code 2)" in out, out
    worker = (tmp_path / "logs" / "worker-0.log").read_text()
    (line,) = [x for x in worker.splitlines() if "no space left" in x]
    free = int(line.split(" bytes are free there")[0].rsplit(" ", 1)[1])
    assert line.endswith(f"{full_message(ckpt / 'epoch_0001.pt', f'more than {free}', free)}; {ckpt} holds no "
                         "complete checkpoint, so a rerun starts afresh")  # fmt: skip
    assert "Traceback" not in worker, worker
    assert done.stderr.splitlines()[-1] == (f"clipflow: error: training failed (exit 2); {ckpt} holds no "
                                            "complete checkpoint, so a rerun starts afresh")  # fmt: skip
    # no checkpoint, no temporary file: the epoch's history line (a rerun drops it) and the launcher's records
    assert files_on(small_disk) == [f"ckpt/{RECORD}", "ckpt/job.json",
                                    *(f"ckpt/{name}{end}" for name in ("metrics.jsonl", "restarts.jsonl", "run.json")
                                      for end in ("", ".sha256"))]  # fmt: skip


def test_two_workers_train_one_epoch_and_write_the_model(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    default_loader = {**TINY, "train": {k: v for k, v in TINY["train"].items() if k != "loader_workers"}}
    done = launch(tmp_path, tiny_videos, splits, overrides=default_loader)
    assert done.returncode == 0, done.stdout + done.stderr
    history = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1] and history[0]["step"] == 2
    assert (tmp_path / "model.pt").stat().st_size > 100_000
    assert "final model" in done.stdout
    # train.loader_workers auto: each worker sized its loader, said so and recorded it (clipflow.train.loader_sizing)
    for worker in history[0]["workers"]:
        chosen = LoaderChoice.from_record(worker["loader"])
        assert chosen.auto and chosen.decode_s > 0 and chosen.step_s > 0 and chosen.batch == 2, worker
        assert chosen.describe().startswith("decode ") and chosen.describe().endswith(", 1 decode thread (auto)")
        assert f"[worker {worker['rank']} localhost] loader: {chosen.describe()}" in done.stdout


def test_validation_each_epoch_covers_the_val_list_once_over_the_workers_and_keeps_the_best(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    val = read_list(scanned_val(tmp_path, tiny_videos))
    three = {**TINY, "train": {**TINY["train"], "epochs": 3, "eval_every": 1}}
    done = launch(tmp_path, tiny_videos, splits, "--val-list", str(tmp_path / "val.lst"), overrides=three)
    assert done.returncode == 0, done.stdout + done.stderr
    history = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert all(h["val_videos"] == len(val) == 8 for h in history)  # worker 0's share + worker 1's
    assert all(0 <= h["val_top1"] <= h["val_top5"] <= 1 and h["val_loss"] > 0 for h in history)
    assert "val loss" in done.stdout and "top-5" in done.stdout
    best = json.loads(next((tmp_path / "ckpt").rglob("best.json")).read_text())
    tops = [h["val_top1"] for h in history]
    assert best["epoch"] == 1 + tops.index(max(tops)) and best["val_top1"] == max(tops)
    saved = torch.load(next((tmp_path / "ckpt").rglob("best.pt")), weights_only=False)
    assert saved["epoch"] == best["epoch"] and set(saved["model"]) == set(
        torch.load(tmp_path / "model.pt", weights_only=False)["model"]
    )


def test_a_missing_or_broken_val_list_is_named_before_anything_starts(tmp_path, tiny_videos, capsys):
    splits = two_splits(tmp_path, tiny_videos)
    missing = launch(tmp_path, tiny_videos, splits, "--val-list", str(tmp_path / "nope.lst"), here=capsys)
    assert missing.returncode == 2 and f"list file {tmp_path / 'nope.lst'} does not exist" in missing.stderr
    (tmp_path / "bad.lst").write_text("videos/val/a.mp4 12 three\n")
    broken = launch(tmp_path, tiny_videos, splits, "--val-list", str(tmp_path / "bad.lst"), here=capsys)
    assert broken.returncode == 2 and f"{tmp_path / 'bad.lst'} line 1" in broken.stderr, broken.stderr
    assert not (tmp_path / "logs").exists()  # no role was started


def test_no_wd_and_gradient_clipping_reach_the_parameter_server(tmp_path, tiny_videos):
    """The recipe's train.no_wd and train.clip_grad configure PSSync (its semantics: ps/test_semantics)."""
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, overrides={**TINY, "train": {**TINY["train"], "no_wd": True,
                                                                             "clip_grad": 0.5}})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gradients clipped to L2 norm 0.5 per worker before the sum" in done.stdout
    spared = next(line for line in done.stdout.splitlines() if "no weight decay on" in line)
    count, total = (int(w) for w in spared.split("no weight decay on ")[1].split(" parameters")[0].split(" of "))
    assert 0 < count < total, spared


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_servers_run_the_optimizer_with_2bit_compression_and_resume_its_states(tmp_path, tiny_videos, optimizer):
    """update_on_kvstore with 2-bit pushes; worker 1 killed in epoch 2; the rerun loads the servers' optimizer
    states (SGD: momentum; Adam: m, v and the step count) from the checkpoint."""
    splits = two_splits(tmp_path, tiny_videos)  # 2 iterations an epoch
    two_epochs = {**TINY, "train": {**TINY["train"], "epochs": 2, "save_frequency": 1, "optimizer": optimizer}}
    flags = ("--update-on-kvstore", "--compression", "2bit", "--compression-threshold", "0.01")
    failed = launch(tmp_path, tiny_videos, splits, *flags, overrides=two_epochs,
                    env_extra={"CLIPFLOW_FAULT_KILL": "1:2:1"})  # fmt: skip
    assert failed.returncode != 0 and "worker 1 on localhost failed (killed by signal SIGKILL)" in failed.stdout
    checkpoint = next((tmp_path / "ckpt").rglob("epoch_0001.pt"))
    states = torch.load(checkpoint, weights_only=False)["optimizer"]
    assert states and all(v.abs().sum() > 0 for v in states.values()), "the servers' states are checkpointed"
    if optimizer == "adam":
        assert all(v.ndim == 1 and v.numel() % 2 == 1 and v[-1] == 2 for v in states.values())  # m, v, t = 2 steps
    done = launch(tmp_path, tiny_videos, splits, *flags, overrides=two_epochs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed from checkpoint" in done.stdout and "epoch 2/2" in done.stdout
    assert (tmp_path / "model.pt").exists()


def test_training_over_curve_when_the_plan_asks_for_it(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, security="curve", env_extra={"PS_VERBOSE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["security"] == "curve" and (tmp_path / "ps_keys" / "server.key_secret").exists()
    assert "curve" in done.stdout.lower()


def test_a_run_killed_inside_an_epoch_resumes_there_and_ends_with_the_uninterrupted_weights(tmp_path, tiny_videos):
    """4 iterations an epoch, a checkpoint every 2: worker 1 killed at epoch 2 iteration 3 (after the checkpoint
    at iteration 2); the rerun starts at epoch 2 iteration 2, with the sampler there, and the final weights equal
    an uninterrupted run's."""
    splits = two_splits(tmp_path, tiny_videos, 8)
    recipe = {**TINY, "model": {"dropout": 0.5},  # drawn per worker and step: the same masks after the resume
              "train": {**TINY["train"], "epochs": 2, "save_every_iters": 2, "keep_checkpoints": 10}}  # fmt: skip
    whole = tmp_path / "whole"
    done = launch(whole, tiny_videos, splits, overrides=recipe)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken"
    failed = launch(broken, tiny_videos, splits, overrides=recipe, env_extra={"CLIPFLOW_FAULT_KILL": "1:2:3"})
    assert failed.returncode != 0 and "worker 1 on localhost failed (killed by signal SIGKILL)" in failed.stdout
    (tmp_path / "results" / "tiny").mkdir(parents=True)
    (tmp_path / "results" / "tiny" / "checkpoints").symlink_to(broken / "ckpt")  # results/<run>/checkpoints
    halfway = status(tmp_path / "results", "tiny")
    run = broken / "ckpt"  # the run's own folder: its checkpoints beside job.json and clipflow's record
    epoch_1 = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert (halfway["epoch"], halfway["epochs"], halfway["finished"]) == (1, 2, False)
    assert halfway["last_checkpoint"] == "epoch_0002_iter_000002.pt" and halfway["recipe"] == "slowfast_tiny_synthetic"
    assert halfway["clips_per_s"] == epoch_1["clips_per_s"] and halfway["eta_s"] is None  # not training: no ETA
    assert halfway["stop_cause"] == "worker 1 on localhost failed (killed by signal SIGKILL), exit 137"
    folder = broken / "ckpt"
    assert sorted(p.name for p in folder.glob("*.pt")) == [
        "epoch_0001.pt", "epoch_0001_iter_000002.pt", "epoch_0002_iter_000002.pt",
    ]  # fmt: skip
    inside = torch.load(folder / "epoch_0002_iter_000002.pt", weights_only=False)
    assert inside["iteration"] == 2 and inside["step"] == 6
    assert [len(lane) for lane in inside["slots"]["lanes"]] == [4, 4]  # of 8 a slot: 2 steps x batch 2 done
    assert inside["layout"] == {"workers": 2, "batch": 2, "accumulate": 1}
    assert inside["partial"]["count"] == 2 * 2 * 2  # 2 workers x 2 iterations x batch 2
    resumed = launch(broken, tiny_videos, splits, overrides=recipe)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "epoch_0002_iter_000002.pt (epoch 2, iteration 2, step 6)" in resumed.stdout
    done_status = status(tmp_path / "results", "tiny")
    assert (done_status["epoch"], done_status["finished"], done_status["last_checkpoint"]) == (2, True, "epoch_0002.pt")
    a = torch.load(whole / "model.pt", weights_only=False)["model"]
    b = torch.load(broken / "model.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    history = [json.loads(line) for line in (broken / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[1]["loss"] == reference[1]["loss"]  # the epoch's totals carried over the restart


def test_progress_lines_and_tensorboard_scalars_without_doubles_after_a_restart(tmp_path, tiny_videos):
    """Worker 1 killed at the start of epoch 2 (no checkpoint yet: save_frequency 2), after rank 0 flushed epoch 1's
    events; the rerun starts over and purges them, so every step has one loss and the epoch curves equal
    metrics.jsonl."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    splits = two_splits(tmp_path, tiny_videos)  # 4 clips per worker, batch 2: 2 iterations an epoch
    recipe = {**TINY, "train": {**TINY["train"], "epochs": 3, "save_frequency": 2}}
    board = tmp_path / "board"
    flags = ("--tensorboard", str(board))
    failed = launch(tmp_path, tiny_videos, splits, *flags, overrides=recipe, env_extra={"CLIPFLOW_FAULT_KILL": "1:2"})
    assert failed.returncode != 0 and "worker 1 on localhost failed" in failed.stdout
    done = launch(tmp_path, tiny_videos, splits, *flags, overrides=recipe, env_extra={"CLIPFLOW_PROGRESS_S": "0.01"})
    assert done.returncode == 0, done.stdout + done.stderr
    bars = [line for line in done.stdout.splitlines() if line.startswith("[worker 0 localhost] epoch 3/3: 100%")]
    assert bars and "2/2" in bars[-1] and "loss " in bars[-1] and " lr " in bars[-1], bars
    assert not any(line.startswith("[worker 1 localhost] epoch ") for line in done.stdout.splitlines())
    events = EventAccumulator(str(board))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert [e.step for e in events.Scalars("train/lr")] == [1, 2, 3, 4, 5, 6]
    history = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    curve = events.Scalars("epoch/loss")
    assert [e.step for e in curve] == [h["step"] for h in history] == [2, 4, 6]
    assert [e.value for e in curve] == pytest.approx([h["loss"] for h in history], rel=1e-6)
    assert [e.value for e in events.Scalars("epoch/lr")] == pytest.approx([h["lr"] for h in history], rel=1e-6)


def test_a_bad_progress_interval_is_named(tmp_path, tiny_videos):
    """Every clipflow command checks the CLIPFLOW_* settings before it does anything (clipflow.environment): the
    launcher names the bad one and starts no process, and the plan command refuses it too."""
    splits = two_splits(tmp_path, tiny_videos)
    bad = {**python_env(), "CLIPFLOW_PROGRESS_S": "often"}
    message = "CLIPFLOW_PROGRESS_S must be seconds between progress lines, a number > 0; got 'often'"
    plan = subprocess.run([sys.executable, "-m", "clipflow", "cluster", "plan", "--out", str(tmp_path / "bad.json")],
                          env=bad, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert plan.returncode == 2 and message in plan.stderr and not (tmp_path / "bad.json").exists(), plan.stderr
    made = subprocess.run([sys.executable, "-m", "clipflow", "cluster", "plan", "--root-port", str(free_port()),
                           "--out", str(tmp_path / "plan.json")], env=python_env(), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = subprocess.run(
        [sys.executable, "-m", "clipflow", "train", "launch", "--plan", str(tmp_path / "plan.json"),
         "--log-dir", str(tmp_path / "logs"), "--recipe", "slowfast_tiny_synthetic", "--overrides", json.dumps(TINY),
         "--splits-dir", str(splits), "--root", str(tiny_videos), "--checkpoint-root", str(tmp_path / "ckpt"),
         "--model-out", str(tmp_path / "model.pt"), "--metrics-out", str(tmp_path / "metrics.jsonl")],
        env=bad, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"clipflow: error: {message}" in done.stderr
    assert not (tmp_path / "logs").exists() and not (tmp_path / "ckpt").exists()  # nothing started, nothing written
