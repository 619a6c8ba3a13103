"""Restarts (train.max_restarts, train.min_workers): a failed launch goes on by itself from the newest checkpoint,
each attempt recorded in <checkpoint_root>/restarts.jsonl; the report draws them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from helpers import assert_refused, python_env
from launch_helpers import TINY, launch, scanned, two_splits
from netns_hosts import ssh_hosts  # noqa: F401
from report_helpers import colour_columns, embedded_figures
from sample_log_helpers import trained_per_epoch

from clipflow.checksums import checksum_path, sha256_of
from clipflow.data.listfile import VideoEntry, read_list, write_list
from clipflow.errors import ClipflowError
from clipflow.train.restarts import Attempt, History, read_attempts

KILLED = {**TINY, "train": {**TINY["train"], "epochs": 2, "save_every_iters": 2, "keep_checkpoints": 10}}


def attempts(run) -> list[dict]:
    return [json.loads(line) for line in (run / "ckpt" / "restarts.jsonl").read_text().splitlines()]


def assert_same_weights(a_file, b_file) -> None:
    a = torch.load(a_file, weights_only=False)["model"]
    b = torch.load(b_file, weights_only=False)["model"]
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


FAILED_BAR, FINISHED_BAR = (222, 82, 83), (86, 179, 86)  # tab:red and tab:green at alpha 0.8 on white


def report_page(run, plan, history, restarts) -> str:
    """`clipflow report` of a trained run (with a stand-in evaluation and data manifest) given its restarts.jsonl;
    the page."""
    metrics = {"recipe": "slowfast_tiny_synthetic", "top1": 0.5, "top5": 1.0, "num_videos": 4, "reference": {}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "manifest.json").write_text(json.dumps({"splits": {"train": {"videos": 16, "failed": 0}}}))
    done = subprocess.run(
        [sys.executable, "-m", "clipflow", "report", "--metrics", str(run / "metrics.json"), "--history",
         str(history), "--manifest", str(run / "manifest.json"), "--plan", str(plan), "--restarts", str(restarts),
         "--out-dir", str(run / "report")],
        env=python_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return (run / "report" / "report.html").read_text()


def assert_timeline(page: str, failures: int) -> None:
    """The page's Restarts section: a red bar per failed attempt left of the green one that finished."""
    assert page.count("<h2>Restarts</h2>") == 1
    timeline = embedded_figures(page)["restarts.png"]
    red, green = colour_columns(timeline, FAILED_BAR), colour_columns(timeline, FINISHED_BAR)
    assert red and green and max(red) < max(green) and min(red) < min(green)
    assert page.count("failed (") >= failures


@pytest.mark.parametrize("backend", ["ps", "ddp"])
def test_a_killed_worker_is_restarted_by_the_launcher_and_ends_with_the_unbroken_weights(
    tmp_path, tiny_videos, backend
):
    """4 iterations an epoch, a checkpoint every 2: worker 1 SIGKILLs itself at epoch 2 iteration 1 (the fault
    fires in the first attempt only); with max_restarts 2 the one launch goes on from epoch 2's first checkpoint
    (epoch_0001.pt... epoch 2 iteration 0 is the end of epoch 1) and exits 0, with the weights of a run never
    broken."""
    splits = two_splits(tmp_path, tiny_videos, 8)
    flags = ("--backend", backend)
    whole = launch(tmp_path / "whole", tiny_videos, splits, *flags, overrides=KILLED)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    broken = tmp_path / "broken"
    done = launch(broken, tiny_videos, splits, *flags, "--max-restarts", "2", overrides=KILLED,
                  env_extra={"CLIPFLOW_FAULT_KILL": "1:2:1"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[worker 1 localhost] fault injection: killing this worker") == 1
    cause = "worker 1 on localhost failed (killed by signal SIGKILL)"
    restart = [line for line in done.stdout.splitlines() if line.startswith("clipflow: restart 1 of 2")]
    assert len(restart) == 1 and cause in restart[0], done.stdout
    assert "hosts kept: localhost; dropped: none; 2 workers; from checkpoint " in restart[0]
    assert restart[0].endswith("epoch_0001.pt"), restart[0]  # epoch 1's end: the newest before iteration 1
    assert_same_weights(tmp_path / "whole" / "model.pt", broken / "model.pt")
    first, second = attempts(broken)
    assert (first["attempt"], first["cause"], first["workers"], first["hosts"]) == (1, cause, 2, ["localhost"])
    assert first["code"] == 137 and first["resumed_from"] is None and first["lost_s"] > 0
    assert (second["attempt"], second["code"], second["cause"], second["lost_s"]) == (2, 0, "", 0)
    assert second["resumed_from"].endswith("epoch_0001.pt") and second["launch"] == first["launch"]
    assert first["started"] < first["ended"] <= second["started"] < second["ended"]
    page = report_page(broken, broken / "plan.json", broken / "metrics.jsonl", broken / "ckpt" / "restarts.jsonl")
    assert_timeline(page, 1)
    assert f"<td>{cause}</td>" in page and "<td>finished</td>" in page


def test_max_restarts_0_ends_at_the_first_failure_as_before(tmp_path, tiny_videos):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, env_extra={"CLIPFLOW_FAULT_KILL": "1:1:1"})
    assert done.returncode == 137, done.stdout + done.stderr
    assert "worker 1 on localhost failed (killed by signal SIGKILL)" in done.stdout
    assert "clipflow: restart" not in done.stdout
    (only,) = attempts(tmp_path)
    assert (only["attempt"], only["code"]) == (1, 137)


def test_a_failure_that_repeats_stops_after_max_restarts_with_each_attempt_recorded(tmp_path, tiny_videos):
    """Worker 1's list names a video that is not there: every attempt fails the same way, the launcher gives up
    after 2 restarts with the exit status of the last, naming the cause."""
    entries = scanned(tiny_videos)
    splits = tmp_path / "splits"
    write_list(splits / "worker0.lst", entries[:4])
    write_list(splits / "worker1.lst", [VideoEntry("no/such/video.mp4", 0, 64), *entries[4:7]])
    done = launch(tmp_path, tiny_videos, splits, "--max-restarts", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    records = attempts(tmp_path)
    assert [r["attempt"] for r in records] == [1, 2, 3]
    assert {r["cause"] for r in records} == {"worker 1 on localhost failed (exit code 2)"}, records
    assert [r["code"] for r in records] == [2, 2, 2]
    assert [line[:27] for line in done.stdout.splitlines() if line.startswith("clipflow: restart ")] == [
        "clipflow: restart 1 of 2 af", "clipflow: restart 2 of 2 af",
    ]  # fmt: skip
    assert "clipflow: restart: no restarts left (2 of 2 made); the last failure: worker 1 on localhost failed" in (
        done.stdout
    )


def test_fewer_min_workers_without_the_training_list_is_refused(tmp_path, tiny_videos, capsys):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, "--max-restarts", "1", "--min-workers", "1", here=capsys)
    assert_refused(done, "train.min_workers 1", "2 workers", "--train-list")
    assert not (tmp_path / "ckpt" / "restarts.jsonl").exists()


def test_fewer_min_workers_on_hosts_with_their_own_disks_is_refused(tmp_path, tiny_videos):
    """Each host holds only its workers' staged videos: a restart without one of them cannot go on."""
    splits = two_splits(tmp_path, tiny_videos)
    staged = tmp_path / "staged.json"
    staged.write_text(json.dumps({"version": 1, "storage": "local", "hosts": {"localhost": {"root": "~/stage"}}}))
    done = launch(tmp_path, tiny_videos, splits, "--max-restarts", "1", "--min-workers", "1", "--train-list",
                  str(splits / "worker0.lst"), "--staged", str(staged), "--host-dir", "~/clipflow-jobs/t")  # fmt: skip
    assert_refused(done, "train.min_workers 1", "own disks", "shared storage")
    assert not (tmp_path / "ckpt" / "restarts.jsonl").exists()


# -- on three hosts (network namespaces with sshd, tests/netns_hosts.py) --------------------------------------


@pytest.fixture(scope="module")
def keyed(ssh_hosts, tmp_path_factory) -> dict[str, str]:  # noqa: F811
    """The job's key authorised on the three hosts, their host keys pinned, a hosts file; the paths."""
    work = tmp_path_factory.mktemp("restart-hosts")
    hosts_file = work / "hosts"
    hosts_file.write_text("".join(f"{h.target}\n" for h in ssh_hosts.hosts))
    job = {"key": str(ssh_hosts.local_home / ".ssh" / "id_ed25519"), "known_hosts": str(work / "known_hosts"),
           "hosts_file": str(hosts_file), "work": str(work)}  # fmt: skip
    done = on_launching_side(ssh_hosts, "cluster", "keys", "--hosts-file", job["hosts_file"], "--ssh-key", job["key"],
                             "--known-hosts", job["known_hosts"])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return job


def on_launching_side(hosts, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**python_env(), "HOME": str(hosts.local_home), **hosts.agent_env}
    return subprocess.run([sys.executable, "-m", "clipflow", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.mark.hosts
def test_a_host_cut_off_mid_epoch_is_dropped_and_the_run_goes_on_on_the_two_others(
    ssh_hosts,  # noqa: F811
    keyed,
    tiny_videos,
):
    """3 hosts, a worker and a server each; host 3's link cut once rank 0 saved inside epoch 1: the launch fails,
    the host check finds host 3 silent, and with min_workers 2 the launcher relaunches on hosts 1 and 2 (2 workers,
    lists split anew from the training list) and the run finishes; restarts.jsonl and the report show it. The
    resume on 2 workers from the 3-worker checkpoint is the trainer's resize, logged with its batch and learning-rate
    decision; the per-sample log shows every training sample of both epochs trained exactly once."""
    import time

    from helpers import free_port

    from clipflow.data.listfile import write_list
    from clipflow.data.splits import write_splits

    work = Path(keyed["work"]) / "cut"
    work.mkdir()
    write_list(work / "train.lst", scanned(tiny_videos)[:24])
    write_splits(work / "train.lst", 3, 0, work / "splits")
    plan = work / "plan.json"
    made = on_launching_side(ssh_hosts, "cluster", "plan", "--launcher", "ssh", "--hosts-file", keyed["hosts_file"],
                             "--num-workers", "3", "--num-servers", "3", "--root-port", str(free_port()),
                             "--heartbeat-timeout", "6", "--ssh-key", keyed["key"], "--known-hosts",
                             keyed["known_hosts"], "--out", str(plan))  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    recipe = {**TINY, "train": {**TINY["train"], "epochs": 2, "save_every_iters": 2, "keep_checkpoints": 10}}
    ckpt = work / "ckpt"
    samples = work / "samples"  # every host writes its workers' lines here (the hosts share this machine's disk)
    env = {
        **python_env(),
        "HOME": str(ssh_hosts.local_home),
        **ssh_hosts.agent_env,
        "CLIPFLOW_SAMPLE_LOG": str(samples),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "clipflow", "train", "launch", "--plan", str(plan), "--log-dir", str(work / "logs"),
         "--recipe", "slowfast_tiny_synthetic", "--overrides", json.dumps(recipe), "--splits-dir",
         str(work / "splits"), "--train-list", str(work / "train.lst"), "--root", str(tiny_videos),
         "--checkpoint-root", str(ckpt), "--model-out", str(work / "model.pt"), "--metrics-out",
         str(work / "metrics.jsonl"), "--grace", "5", "--max-restarts", "1", "--min-workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    cut = ssh_hosts.hosts[2]
    try:
        deadline = time.monotonic() + 300
        while not (ckpt / "epoch_0001_iter_000002.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
        ssh_hosts.link_down(2)
        out, _ = proc.communicate(timeout=540)
    finally:
        ssh_hosts.link_up(2)
        if proc.poll() is None:
            proc.kill()
    restart = [line for line in out.splitlines() if line.startswith("clipflow: restart 1 of 1 after: ")]
    assert len(restart) == 1, out[-6000:]
    kept = f"{ssh_hosts.hosts[0].target}, {ssh_hosts.hosts[1].target}"
    assert f"hosts kept: {kept}; dropped: {cut.target}; 2 workers; from checkpoint " in restart[0], restart[0]
    assert f"clipflow: restart: {cut.target} does not answer" in out
    first, second = [json.loads(line) for line in (ckpt / "restarts.jsonl").read_text().splitlines()]
    assert (first["attempt"], first["workers"], len(first["hosts"])) == (1, 3, 3) and first["code"] != 0
    assert first["cause"] and first["resumed_from"] is None and first["lost_s"] >= 0
    assert (second["attempt"], second["workers"], second["hosts"]) == (2, 2, kept.split(", "))
    assert sorted(p.name for p in (ckpt / "splits-2w").glob("*.lst")) == ["worker0.lst", "worker1.lst"]
    assert (ckpt / "splits-2w" / "job.json").exists()
    assert proc.returncode == 0 and second["code"] == 0, out[-6000:]
    page = report_page(work, plan, work / "metrics.jsonl", ckpt / "restarts.jsonl")
    assert_timeline(page, 0)
    assert f"<td>{kept}</td>" in page
    # the resize (issue 19 point 2): the 2 workers go on from the 3 workers' checkpoint inside epoch 1
    after = out[out.index(restart[0]) :]
    assert "resumed from checkpoint" in after and "starting from scratch" not in after, after[-4000:]
    assert "resize: 3 workers x 2 clips x 1 -> 2 workers x 2 clips x 1 (scale: global batch 6 -> 4)" in after, after
    # every training sample of every epoch trained as often as the epoch's lists hold it (once; the wrap fill
    # repeats 2 of the 16 videos to give 3 workers 6 each) over both attempts: 3 workers, then 2
    counts = trained_per_epoch(samples)
    lists = {1: sorted((work / "splits").glob("*.lst")), 2: sorted((ckpt / "splits-2w").glob("*.lst"))}
    assert sorted(counts) == [1, 2]
    for epoch, paths in lists.items():
        planned = Counter(entry.path for path in paths for entry in read_list(path))
        assert counts[epoch] == planned, (epoch, counts[epoch], planned)
    assert sum(counts[1].values()) == 18 and sum(counts[2].values()) == 16


@pytest.mark.hosts
def test_each_restart_checks_every_host_of_the_first_plan_so_a_host_that_came_back_is_used_again(
    ssh_hosts,  # noqa: F811
    keyed,
):
    """The host check a restart makes (run_with_restarts passes it the first plan every time): with host 3's
    link down it answers hosts 1 and 2 and names host 3; with the link up again host 3 is back in the next."""
    from helpers import free_port

    plan_file = Path(keyed["work"]) / "plan-back.json"
    made = on_launching_side(ssh_hosts, "cluster", "plan", "--launcher", "ssh", "--hosts-file", keyed["hosts_file"],
                             "--num-workers", "3", "--root-port", str(free_port()), "--ssh-key", keyed["key"],
                             "--known-hosts", keyed["known_hosts"], "--out", str(plan_file))  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    check = ("import json, sys; from clipflow.hosts.plan import Plan; "
             "from clipflow.train.restarts import reachable_hosts, role_host; "
             "print(json.dumps([role_host(h) for h in reachable_hosts(Plan.read(sys.argv[1]))]))")  # fmt: skip
    env = {**python_env(), "HOME": str(ssh_hosts.local_home), **ssh_hosts.agent_env}  # as the launcher runs it

    def answering() -> tuple[list[str], str]:
        done = subprocess.run([sys.executable, "-c", check, str(plan_file)], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        *said, last = done.stdout.strip().splitlines()
        return json.loads(last), "\n".join(said)

    targets = [h.target for h in ssh_hosts.hosts]
    ssh_hosts.link_down(2)
    try:
        there, said = answering()
    finally:
        ssh_hosts.link_up(2)
    assert there == targets[:2] and said.startswith(f"clipflow: restart: {targets[2]} does not answer"), said
    assert answering()[0] == targets


def an_attempt(number: int, code: int) -> Attempt:
    return Attempt(launch=1.0, attempt=number, started=10.0 * number, ended=10.0 * number + 5, code=code,
                   cause=f"worker 1 exited {code}" if code else "", hosts=["localhost"], workers=2,
                   resumed_from=None, lost_s=0.5)  # fmt: skip


def test_a_cut_restarts_record_is_set_aside_and_the_next_attempt_goes_on_a_line_of_its_own(tmp_path):
    root, said = tmp_path / "ckpt", []
    History(root, said.append).add(an_attempt(1, 1))
    record = root / "restarts.jsonl"
    cut = json.dumps(asdict(an_attempt(2, 1))).encode()[:40]  # the launcher killed while writing attempt 2
    record.write_bytes(record.read_bytes() + cut)

    History(root, said.append).add(an_attempt(3, 0))

    assert (root / "restarts.jsonl.cut-1").read_bytes() == cut
    assert [a["attempt"] for a in read_attempts(record)] == [1, 3]
    assert record.read_text().count("\n") == 2 and checksum_path(record).read_text().split()[0] == sha256_of(record)
    assert said == [
        f"clipflow: {record} ended in a line cut short (40 bytes without a newline, from a write that was stopped): "
        f"its bytes are set aside in {root / 'restarts.jsonl.cut-1'} and the record goes on after its 1 whole "
        "lines; look at restarts.jsonl.cut-1 and delete it when it holds nothing you need"
    ]


def test_the_report_reads_the_whole_attempts_of_a_cut_record_and_names_a_line_that_is_no_attempt(tmp_path, capsys):
    record = tmp_path / "restarts.jsonl"
    cut = '{"attempt": 2, "sta'  # 19 bytes
    record.write_text(json.dumps(asdict(an_attempt(1, 1))) + "\n" + cut)
    assert [a["attempt"] for a in read_attempts(record)] == [1]
    assert capsys.readouterr().err == (
        f"clipflow: note: restarts record {record} line 2 is cut short ({len(cut)} bytes without a newline, from a "
        "write that was stopped): left out; the next write to the record sets it aside beside it\n"
    )
    record.write_text(json.dumps(asdict(an_attempt(1, 1))) + '\n{"attempt": 2, "code": 1}\n')
    with pytest.raises(ClipflowError) as err:
        read_attempts(record)
    assert str(err.value) == (
        f"restarts record {record} line 2 is not an attempt (it has no started, ended, cause, workers); expected "
        "one JSON object an attempt, as the launcher writes restarts.jsonl"
    )
