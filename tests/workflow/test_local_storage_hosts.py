"""Separate machines: three sshd hosts with private disks, one `snakemake --cores 1 train_slowfast` with
``cluster.storage: auto`` from stage to report, fine-tuned from a weights file (``train.init_from``) only the
launcher has, a user's file in the run's folder on a host refused, a worker killed and a plan changed on the way.

The hosts (tests/netns_hosts.py) each have their own home, where their staging folder and the run's folder live
(not seen by the launcher, which names them from its own home, nor by the other hosts). Inside every host the
launcher's working folder is mounted read-only and its results (the source videos, the run's files, the job's
keys) are hidden under an empty read-only tmpfs: a role that writes outside its own disk, or reads a file that
was not put on its disk, fails the run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import python_env
from netns_hosts import NetnsHosts, ssh_hosts  # noqa: F401
from workflow_helpers import TINY, three_host_cluster, workflow_for_hosts

from clipflow.checksums import sha256_of
from clipflow.data.listfile import read_list
from clipflow.models.builder import build_model
from clipflow.recipe import load_recipe

pytestmark = pytest.mark.hosts
RUN = "apart"
DATA_DIR = "results/data/apart"
WEIGHTS = "results/start/model.pt"  # under the launcher's results: no host sees it


@pytest.fixture(scope="module")
def flow(ssh_hosts: NetnsHosts, tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Path:  # noqa: F811
    """A copy of the workflow configured for the three hosts, ssh launcher, storage auto; the hosts see it
    read-only, its data folder not at all."""
    work = tmp_path_factory.mktemp("apart") / "flow"
    work.mkdir()
    python = workflow_for_hosts(repo, work)
    for name, order in (("hosts", (0, 1, 2)), ("hosts-turned", (1, 2, 0))):
        (work / name).write_text("".join(f"{ssh_hosts.hosts[i].target}\n" for i in order))
    key, known_hosts = str(ssh_hosts.local_home / ".ssh" / "id_ed25519"), str(work / "known_hosts")
    # no link check: this test is about storage (tests/cluster/test_links_hosts and the shared-storage run of
    # tests/cluster/test_cluster_hosts check links); the two plans it makes would measure them twice
    cluster = three_host_cluster(python, key, known_hosts, storage="auto", link_check=False)
    overrides = {**TINY["overrides"], "train": {**TINY["overrides"]["train"], "init_from": WEIGHTS}}
    tiny = {**TINY, "data": {**TINY["data"], "dir": DATA_DIR}, "run": RUN, "cluster": cluster, "overrides": overrides}
    (work / "tiny.yaml").write_text(json.dumps(tiny))
    recipe = load_recipe("slowfast_tiny_synthetic", TINY["overrides"])
    torch.manual_seed(7)  # not the run's seed: the file's weights are not the ones the run would make
    (work / WEIGHTS).parent.mkdir(parents=True)
    torch.save({"model": build_model(recipe["model"]).state_dict(), "recipe": recipe}, work / WEIGHTS)
    for i in range(len(ssh_hosts.hosts)):
        ssh_hosts.mount_readonly(i, work)
        ssh_hosts.mount_tmpfs(i, work / "results", "64k")  # the launcher's results: not there on any host
        ssh_hosts.mount_readonly(i, work / "results")
    return work


def snakemake(hosts: NetnsHosts, work: Path, hosts_file: str, fault: str = "") -> subprocess.CompletedProcess:
    env = {**python_env(), "HOME": str(hosts.local_home), **hosts.agent_env}
    if fault:
        env["CLIPFLOW_FAULT_KILL"] = fault
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "train_slowfast", "--configfile", "tiny.yaml",
         "--config", f"cluster={{hosts_file: {work / hosts_file}}}"],
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def jobs_run(done: subprocess.CompletedProcess) -> set[str]:
    """The rules Snakemake ran (its 'rule NAME:' or 'localrule NAME:' lines)."""
    return set(re.findall(r"^(?:local)?rule (\w+):$", done.stdout + done.stderr, re.MULTILINE))


def expected_share(work: Path, plan: dict) -> dict[str, set[str]]:
    """Per host, the videos its workers read: their split lists and their share of the val list (rank r of W
    scores entries r, r + W, ...)."""
    val = read_list(work / DATA_DIR / "index/val.lst")
    width = plan["num_workers"]
    share: dict[str, set[str]] = {}
    for role in plan["roles"]:
        if role["role"] == "worker":
            mine = share.setdefault(role["host"], set())
            mine |= {e.path for e in read_list(work / f"results/{RUN}/splits/worker{role['rank']}.lst")}
            mine |= {e.path for e in val[role["rank"] :: width]}
    return share


def staged_files(hosts: NetnsHosts, i: int, name: str) -> set[str]:
    folder = hosts.hosts[i].home / "clipflow-stage" / name
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")}


def test_three_hosts_with_their_own_disks_stage_train_resume_and_report(ssh_hosts: NetnsHosts, flow: Path) -> None:  # noqa: F811
    results = flow / "results" / RUN
    # 0. a file of the user's where the run's val list goes on host 2: refused by name before any role starts,
    # never replaced
    theirs = ssh_hosts.hosts[2].home / f"clipflow-jobs/{RUN}/val.lst"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("their own\n")
    refused = snakemake(ssh_hosts, flow, "hosts")
    assert refused.returncode != 0
    said = (flow / f"logs/{RUN}/train.log").read_text()
    assert re.search(rf"{re.escape(ssh_hosts.hosts[2].target)}: \S*clipflow-jobs/{RUN}/val.lst is not a file clipflow "
                     r"put there \(its folder's .clipflow-made.json does not name it\), so it is not replaced; move it "
                     "away there", said), said[-3000:]  # fmt: skip
    assert theirs.read_text() == "their own\n" and "epoch 1/" not in said  # kept, and no role trained
    theirs.unlink()
    # 1. worker 1 killed in epoch 2 after its first step (so rank 0 saved epoch 1 on its own disk): the run fails
    first = snakemake(ssh_hosts, flow, "hosts", fault="1:2:1")
    assert first.returncode != 0, (first.stdout + first.stderr)[-4000:]
    checks = json.loads((results / "cluster/checks.json").read_text())
    assert checks["storage"]["setting"] == "auto" and checks["storage"]["mode"] == "local", checks["storage"]
    assert "does not see" in checks["storage"]["reason"] or "cannot write" in checks["storage"]["reason"]
    staged = json.loads((results / "cluster/staged.json").read_text())
    plan = json.loads((results / "cluster/plan.json").read_text())
    videos = json.loads((flow / DATA_DIR / "index/videos.json").read_text())["files"]
    share = expected_share(flow, plan)
    train_total = sum(r["size"] for p, r in videos.items() if p in {e.path for e in
                      read_list(flow / DATA_DIR / "index/train.lst")})  # fmt: skip
    for i, host in enumerate(ssh_hosts.hosts):
        assert staged_files(ssh_hosts, i, staged["name"]) == share[host.target]  # exactly its workers' videos
        facts = staged["hosts"][host.target]
        assert facts["bytes"] == sum(videos[p]["size"] for p in share[host.target])
        assert facts["bytes"] < 0.6 * staged["total_bytes"] and facts["train_files"] == 8  # a third of 24
    assert staged["total_bytes"] > train_total
    rank0 = ssh_hosts.hosts[0]
    checkpoints = rank0.home / f"clipflow-jobs/{RUN}/checkpoints"  # the run's own folder, no subfolder
    assert (checkpoints / "epoch_0001.pt").is_file() and not [p for p in checkpoints.iterdir() if p.is_dir()]
    assert not (ssh_hosts.hosts[1].home / f"clipflow-jobs/{RUN}/checkpoints").exists()  # only rank 0 writes them
    home_copy = results / "checkpoints" / "epoch_0001.pt"
    assert home_copy.is_file()  # kept at home after the failure
    # train.init_from went to rank 0's host with the job, and rank 0 started from it there
    there = f"/root/clipflow-jobs/{RUN}/init_from/model.pt"
    assert sha256_of(rank0.home / f"clipflow-jobs/{RUN}/init_from/model.pt") == sha256_of(flow / WEIGHTS)
    tensors = len(torch.load(flow / WEIGHTS, weights_only=True)["model"])
    assert f"train.init_from: {tensors} of {tensors} tensors loaded from {there} (a clipflow model" in (
        flow / f"logs/{RUN}/train.log").read_text()  # fmt: skip
    started = torch.load(home_copy, weights_only=True)["init_from"]
    assert started["file"] == there and started["sha256"] == sha256_of(flow / WEIGHTS)

    # 2. the same command (worker 1 now killed in epoch 3, after its first step): only training reruns, from rank
    # 0's local checkpoint
    second = snakemake(ssh_hosts, flow, "hosts", fault="1:3:1")
    assert second.returncode != 0, (second.stdout + second.stderr)[-4000:]
    assert jobs_run(second) == {"train"}, jobs_run(second)
    train_log = (flow / f"logs/{RUN}/train.log").read_text()
    assert f"the newest checkpoint, epoch_0001.pt, is on rank 0's host {rank0.target}" in train_log
    assert "resumed from checkpoint /root/clipflow-jobs/" in train_log and "epoch_0001.pt (epoch 1" in train_log

    # 3. a plan whose first host is another: the newest checkpoint (epoch 2, on host 1) is placed on host 2
    third = snakemake(ssh_hosts, flow, "hosts-turned")
    assert third.returncode == 0, (third.stdout + third.stderr)[-6000:]
    assert {"cluster_plan", "stage", "train", "collect", "evaluate", "report"} <= jobs_run(third)
    assert not {"splits", "data_scan", "data_synthetic"} & jobs_run(third)
    train_log = (flow / f"logs/{RUN}/train.log").read_text()
    new_rank0 = ssh_hosts.hosts[1]
    placed = re.search(r"the newest checkpoint, epoch_0002.pt, was (on \S+|at home \(.*?\)); placed on rank 0's "
                       f"host {re.escape(new_rank0.target)}", train_log)  # fmt: skip
    assert placed, train_log[-3000:]  # from host 1's disk, or from the copy kept at home after the failure
    assert "epoch_0002.pt (epoch 2" in train_log
    plan = json.loads((results / "cluster/plan.json").read_text())
    staged = json.loads((results / "cluster/staged.json").read_text())
    for i, host in enumerate(ssh_hosts.hosts):  # what the turned plan's workers read is there (earlier files kept)
        assert expected_share(flow, plan)[host.target] <= staged_files(ssh_hosts, i, staged["name"])
    history = [json.loads(line) for line in (results / "train/metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    metrics = json.loads((results / "metrics.json").read_text())
    assert metrics["num_videos"] == TINY["data"]["synthetic"]["num_val"]
    collected = json.loads((results / "collected/manifest.json").read_text())
    kinds = {f["kind"] for f in collected["files"] if f["host"] == new_rank0.target}
    facts = next(f for f in collected["files"] if f["kind"] == "run_facts")
    assert json.loads((flow / facts["local"]).read_text())["init_from"]["file"] == there  # kept across the resumes
    assert {"model", "checkpoint", "history", "run_facts", "log"} <= kinds
    status = subprocess.run([sys.executable, "-m", "clipflow", "status", RUN], cwd=flow, capture_output=True,
                            text=True, env={**python_env(), "HOME": str(ssh_hosts.local_home)}, timeout=60)  # fmt: skip
    assert status.returncode == 0, status.stdout + status.stderr
    assert "epoch 3/3" in status.stdout  # rank 0's own disk (the copy kept at home stopped at epoch 2)
    assert f"read from: {new_rank0.target}:~/clipflow-jobs/{RUN}/checkpoints" in status.stdout, status.stdout
    report = (results / "report/report.html").read_text()
    assert "Storage" in report and "local (auto)" in report and str(staged["total_bytes"]) in report
