"""A stop on notice (SIGUSR1 or SIGTERM to `clipflow train launch`: a spot reclaim, Slurm's --signal=USR1@120):
every worker finishes its step, rank 0 checkpoints inside the epoch, all exit RESUMABLE (79) within the stop grace
with one line saying where, and the rerun ends with the weights of a run never stopped, on both back ends."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from launch_helpers import TINY, launch, launch_command, scanned

from clipflow.data.listfile import write_list
from clipflow.errors import RESUMABLE
from clipflow.hosts.plan import Role
from clipflow.launch.processes import FORWARD_NOTICE, TRAIN_NOTICE, Launcher, NoticePolicy, RoleCommand

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)

# 2 workers x 16 clips (the tiny set's 8 videos a worker, each listed twice), batch 2: 8 iterations an epoch, so that
# a signal sent at an epoch's first progress line is taken inside it; dropout is drawn per worker and step (the same
# masks after the resume); no checkpoint inside an epoch but the notice's
RECIPE = {**TINY, "model": {"dropout": 0.5},
          "train": {**TINY["train"], "epochs": 2, "save_every_iters": 0, "keep_checkpoints": 10}}  # fmt: skip
STOP_GRACE = 60
ITERS = 8


def doubled_splits(tmp_path, tiny_videos):
    """worker0.lst and worker1.lst: 8 of the tiny set's videos each, every one listed twice; their folder."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    write_list(splits / "worker0.lst", entries[:8] * 2)
    write_list(splits / "worker1.lst", entries[8:16] * 2)
    return splits


STOPPED = re.compile(r"stopped on notice at epoch (\d+) iteration (\d+); checkpoint (\S+); rerun the same command")


def signalled_run(folder, tiny_videos, splits, signum, when, *extra: str, plan_args=()):
    """A launch sent ``signum`` once a line of its output contains ``when``: its exit code, its output and the
    seconds from the signal to its exit."""
    argv, env = launch_command(folder, tiny_videos, splits, "--stop-grace", str(STOP_GRACE), *extra,
                               overrides=RECIPE, env_extra={"CLIPFLOW_PROGRESS_S": "0.001"},
                               plan_args=plan_args)  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, sent_at = [], None
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if sent_at is None and when in line:
                proc.send_signal(signum)
                sent_at = time.monotonic()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sent_at is not None, "".join(lines)
    return code, "".join(lines), time.monotonic() - sent_at


def final_weights(folder) -> dict[str, torch.Tensor]:
    return torch.load(folder / "model.pt", weights_only=False)["model"]


def assert_equal_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_sigusr1_mid_epoch_stops_resumable_and_the_rerun_ends_with_the_unbroken_weights(tmp_path, tiny_videos,
                                                                                        backend):  # fmt: skip
    """SIGUSR1 at epoch 2's first progress line: exit 79 within the grace, the one line, a checkpoint inside epoch 2
    (the only one: save_every_iters 0); the rerun resumes there and ends torch.equal to an unbroken run."""
    splits = doubled_splits(tmp_path, tiny_videos)
    whole = tmp_path / "whole"
    done = launch(whole, tiny_videos, splits, "--backend", backend, overrides=RECIPE)
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    code, out, took = signalled_run(stopped, tiny_videos, splits, signal.SIGUSR1, "] epoch 2/2:", "--backend", backend)
    assert code == RESUMABLE, out
    assert took < STOP_GRACE, out
    said = [line for line in out.splitlines() if line.startswith("clipflow launch: got SIGUSR1: stopped on notice")]
    assert len(said) == 1, out
    epoch, iteration, path = STOPPED.search(said[0]).groups()  # type: ignore[union-attr]
    print(said[0], f"{took:.1f} s after the signal")  # pytest -s: where it stopped, how fast
    assert epoch == "2" and 1 <= int(iteration) < ITERS, said
    assert "clipflow: error" not in out  # a stop on notice is no failure
    folder = stopped / "ckpt"  # the run's checkpoints
    inside = sorted(p.name for p in folder.glob("*_iter_*.pt"))
    assert inside == [f"epoch_0002_iter_{int(iteration):06d}.pt"] and path == str(folder / inside[0]), out
    assert not (stopped / "model.pt").exists()
    resumed = launch(stopped, tiny_videos, splits, "--backend", backend, overrides=RECIPE)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{inside[0]} (epoch 2, iteration {iteration}" in resumed.stdout
    assert_equal_weights(final_weights(whole), final_weights(stopped))
    history = [json.loads(line) for line in (stopped / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [h["loss"] for h in history] == [r["loss"] for r in reference]


def test_three_ddp_workers_resumed_inside_an_epoch_sum_their_gradients_as_the_unbroken_run(tmp_path, tiny_videos):
    """3 workers (a sum of 3 rounds by the order it is added in, unlike one of 2): the resumed run's first step
    sums its gradients in the buckets the unbroken run's step used (DDP used to put them all in one bucket for a
    process's first step), so the losses and weights stay those of the unbroken run."""
    entries, splits = scanned(tiny_videos), tmp_path / "splits"
    for rank in range(3):  # 4 videos each, listed twice: 4 iterations an epoch
        write_list(splits / f"worker{rank}.lst", entries[rank * 4 : (rank + 1) * 4] * 2)
    three = ("--num-workers", "3")
    whole = tmp_path / "whole"
    done = launch(whole, tiny_videos, splits, "--backend", "ddp", overrides=RECIPE, plan_args=three)
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    code, out, _ = signalled_run(stopped, tiny_videos, splits, signal.SIGUSR1, "] epoch 1/2:", "--backend", "ddp",
                                 plan_args=three)  # fmt: skip
    assert code == RESUMABLE and "stopped on notice at epoch 1 iteration" in out, out
    resumed = launch(stopped, tiny_videos, splits, "--backend", "ddp", overrides=RECIPE, plan_args=three)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "(epoch 1, iteration " in resumed.stdout
    history = [json.loads(line)["loss"] for line in (stopped / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line)["loss"] for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert history == reference
    assert_equal_weights(final_weights(whole), final_weights(stopped))


def test_sigterm_while_the_workers_start_stops_them_inside_epoch_1_and_the_rerun_ends_with_the_unbroken_weights(
    tmp_path, tiny_videos
):
    """SIGTERM (a spot reclaim) at the first line of the run, while the workers are still starting (a worker
    without its handler yet holds the notice instead of dying of it): they stop after the first step they agree
    on, inside epoch 1, exit 79; the rerun goes on from there to the unbroken run's weights (ddp)."""
    splits = doubled_splits(tmp_path, tiny_videos)
    whole = tmp_path / "whole"
    done = launch(whole, tiny_videos, splits, "--backend", "ddp", overrides=RECIPE)
    assert done.returncode == 0, done.stdout + done.stderr
    stopped = tmp_path / "stopped"
    code, out, took = signalled_run(stopped, tiny_videos, splits, signal.SIGTERM, "[worker ", "--backend", "ddp")
    assert code == RESUMABLE and took < STOP_GRACE, out
    said = [line for line in out.splitlines() if line.startswith("clipflow launch: got SIGTERM: stopped on notice")]
    assert len(said) == 1, out
    epoch, iteration, path = STOPPED.search(said[0]).groups()  # type: ignore[union-attr]
    print(said[0], f"{took:.1f} s after the signal")
    assert epoch == "1" and 1 <= int(iteration) < ITERS, said
    folder = stopped / "ckpt"  # the run's checkpoints
    assert sorted(p.name for p in folder.glob("*.pt")) == [f"epoch_0001_iter_{int(iteration):06d}.pt"], out
    resumed = launch(stopped, tiny_videos, splits, "--backend", "ddp", overrides=RECIPE)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"(epoch 1, iteration {iteration}" in resumed.stdout
    assert_equal_weights(final_weights(whole), final_weights(stopped))


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), as a scheduler's signal to a whole job reaches them."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(stat[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def test_sigusr1_to_every_process_as_slurm_sends_it_stops_a_ps_run_resumable(tmp_path, tiny_videos):
    """Slurm's --signal=USR1@120 signals every process of the job: the scheduler and servers ignore it, each worker
    gets it twice (straight and passed on by the launcher), and the run still stops on notice, exit 79."""
    splits = doubled_splits(tmp_path, tiny_videos)
    argv, env = launch_command(tmp_path, tiny_videos, splits, "--stop-grace", str(STOP_GRACE), "--backend", "ps",
                               overrides=RECIPE, env_extra={"CLIPFLOW_PROGRESS_S": "0.001"})  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, reached = [], []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if not reached and "] epoch 2/2:" in line:
                reached = [proc.pid, *descendants(proc.pid)]
                for pid in reached:
                    os.kill(pid, signal.SIGUSR1)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert len(reached) >= 5, out  # the launcher, the scheduler, a server, two workers
    assert code == RESUMABLE, out
    assert "clipflow launch: got SIGUSR1: stopped on notice at epoch 2 iteration" in out
    assert not re.search(r"(scheduler|server) \d+ on localhost failed", out)


# A worker on its way out: the notice's handler in place, then (with "retire") Notice.retire as run_worker ends,
# then an exit whose shutdown takes a second (a module global's finaliser), as torch's can.
EXITING = """
import signal, sys, time
from clipflow.launch.notice import Notice
notice = Notice.install()
if "retire" in sys.argv:
    notice.retire()
class SlowShutdown:
    def __del__(self):
        time.sleep(1.0)
slow = SlowShutdown()
print("exiting", flush=True)
sys.exit(79)
"""


def exit_under_notices(*args: str) -> int:
    """The exit status of EXITING, sent SIGUSR1 every 10 ms (a late notice from Slurm) from its last line on."""
    proc = subprocess.Popen([sys.executable, "-c", EXITING, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "exiting\n"  # type: ignore[union-attr]
    while proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    return proc.wait(timeout=30)


def test_a_notice_while_a_worker_exits_leaves_its_exit_status():
    """CI's Slurm job: the launcher passed its notice on, the workers stopped (79), and Slurm's own SIGUSR1 came
    while they shut down, after Python had given SIGUSR1 back its default action: exit 138, and the job FAILED
    instead of requeued. A retired notice (run_worker's last act) ignores SIGUSR1 to the process's end."""
    assert exit_under_notices() == -signal.SIGUSR1  # what Python does without it (why the retire is needed)
    assert exit_under_notices("retire") == RESUMABLE


# ---------------------------------------------------------------- the launcher alone, with small real programs

# A worker that takes 1 s to put its handler in place (SIGUSR1 held until then), then on SIGUSR1 says where it
# stopped, as a training worker does, and exits RESUMABLE; with "keep-going" it only says it got it.
WORKER = """
import signal, sys, time
time.sleep(1)
def on_notice(signum, frame):
    if "keep-going" in sys.argv:
        print("got it; going on", flush=True)
        return
    print("stopped on notice at epoch 1 iteration 2; checkpoint /ckpt/epoch_0001_iter_000002.pt; "
          "rerun the same command to go on", flush=True)
    sys.exit(79)
signal.signal(signal.SIGUSR1, on_notice)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
print("ready", flush=True)
time.sleep(120)
"""


def workers(*args: str, count: int = 2, hold: bool = True) -> list[RoleCommand]:
    return [RoleCommand(Role("worker", rank, "localhost"), [sys.executable, "-c", WORKER, *args], hold_notice=hold)
            for rank in range(count)]  # fmt: skip


def run_signalled(launcher: Launcher, *signals: tuple[float, int]) -> tuple[int, float]:
    """``launcher.run()`` in this (main) thread, sent each (after seconds, signal); its code and seconds."""
    for after, signum in signals:
        threading.Timer(after, lambda s=signum: os.kill(os.getpid(), s)).start()
    began = time.monotonic()
    return launcher.run(), time.monotonic() - began


def test_a_notice_while_the_workers_start_waits_for_their_handlers_and_ends_resumable(tmp_path):
    """SIGUSR1 to the launcher at once, before the workers take it: held, it reaches them once their handler is in
    place; both exit RESUMABLE and the launcher exits 79 with the stop's line, well within the notice time."""
    console = io.StringIO()
    launcher = Launcher(workers(), tmp_path, console=console, notice=NoticePolicy(TRAIN_NOTICE, 30))
    code, took = run_signalled(launcher, (0.05, signal.SIGUSR1))
    text = console.getvalue()
    assert code == RESUMABLE, text
    assert took < 30, text
    assert "got SIGUSR1: a notice; passed SIGUSR1 on to 2 workers" in text
    assert ("clipflow launch: got SIGUSR1: stopped on notice at epoch 1 iteration 2; checkpoint "
            "/ckpt/epoch_0001_iter_000002.pt; rerun the same command to go on") in text  # fmt: skip


def test_sigterm_to_the_launcher_is_a_notice_too_but_not_for_evaluation(tmp_path):
    """Training: SIGTERM passes SIGUSR1 on (exit 79). Without a notice policy (evaluate launch) SIGTERM and SIGUSR1
    stop everything at once (SIGUSR1 used to kill the launcher itself, leaving local roles running)."""
    console = io.StringIO()
    launcher = Launcher(workers(), tmp_path / "train", console=console, notice=NoticePolicy(TRAIN_NOTICE, 30))
    assert run_signalled(launcher, (1.5, signal.SIGTERM))[0] == RESUMABLE, console.getvalue()
    console = io.StringIO()
    launcher = Launcher(workers(hold=False), tmp_path / "evaluate", console=console)
    code, _ = run_signalled(launcher, (1.5, signal.SIGUSR1))
    assert code == 128 + signal.SIGUSR1, console.getvalue()
    assert "got SIGUSR1; stopped 2 running processes" in console.getvalue()


def test_workers_still_running_when_the_notice_time_is_up_are_torn_down_not_resumable(tmp_path):
    console = io.StringIO()
    launcher = Launcher(workers("keep-going"), tmp_path, grace_s=2, console=console,
                        notice=NoticePolicy(TRAIN_NOTICE, 2))  # fmt: skip
    code, took = run_signalled(launcher, (1.5, signal.SIGUSR1))
    text = console.getvalue()
    assert code == 128 + signal.SIGUSR1, text
    assert "got it; going on" in text
    assert "the workers did not stop within 2 s of the notice; stopping everything" in text
    assert took < 1.5 + 2 + 2 + 5, text  # notice time, then SIGTERM's grace (the workers end on it)


def test_a_second_signal_during_a_notice_tears_down_at_once(tmp_path):
    console = io.StringIO()
    launcher = Launcher(workers("keep-going"), tmp_path, grace_s=2, console=console,
                        notice=NoticePolicy(TRAIN_NOTICE, 60))  # fmt: skip
    code, took = run_signalled(launcher, (1.5, signal.SIGUSR1), (2.5, signal.SIGUSR1))
    text = console.getvalue()
    assert code == 128 + signal.SIGUSR1, text
    assert "got it; going on" in text and "got SIGUSR1; stopped 2 running processes" in text
    assert took < 30, text  # not the notice's 60 s


def test_clipflow_launch_passes_sigusr1_on_to_its_programs(tmp_path):
    """`clipflow launch` (FORWARD_NOTICE): the program gets SIGUSR1 and decides; here it ends cleanly (exit 0) and
    so does the launcher; one that does not take it dies of it, which is no failure but not 0 either."""
    ends = "import signal,sys,time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(0)); print('up', flush=True); " \
           "time.sleep(120)"  # fmt: skip
    console = io.StringIO()
    cmds = [RoleCommand(Role("worker", 0, "localhost"), [sys.executable, "-c", ends])]
    launcher = Launcher(cmds, tmp_path / "a", console=console, notice=NoticePolicy(FORWARD_NOTICE, 30))
    assert run_signalled(launcher, (1.5, signal.SIGUSR1))[0] == 0, console.getvalue()
    assert "got SIGUSR1; every worker then exited 0" in console.getvalue()
    console = io.StringIO()
    cmds = [RoleCommand(Role("worker", 0, "localhost"), [sys.executable, "-c", "import time; time.sleep(120)"])]
    launcher = Launcher(cmds, tmp_path / "b", console=console, notice=NoticePolicy(FORWARD_NOTICE, 30))
    code, took = run_signalled(launcher, (1.5, signal.SIGUSR1))
    assert code == 128 + signal.SIGUSR1 and took < 30, console.getvalue()
    assert "the workers ended (killed by signal SIGUSR1)" in console.getvalue()
