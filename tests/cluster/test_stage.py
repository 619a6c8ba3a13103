"""`clipflow cluster stage|unstage` with a plan whose roles read the data where it is (local and slurm launchers):
nothing to stage, said in one line, and no host reached. The staging itself, on sshd hosts without shared storage,
is in tests/cluster/test_stage_hosts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import clipflow

from clipflow.cluster.checks import check_plan
from clipflow.cluster.stage import stage_data, unstage
from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host, hosts_from_config
from clipflow.hosts.plan import Plan, make_plan
from clipflow.hosts.staged import read_staged


def test_a_local_plan_stages_and_unstages_nothing(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    make_plan("local", hosts_from_config(["localhost"]), 2, 1, 9091, 30.0, "none").write(plan)
    root, out, stage_dir = tmp_path / "videos", tmp_path / "staged.json", tmp_path / "stage"
    done = clipflow("cluster", "stage", "--plan", str(plan), "--checks", str(tmp_path / "checks.json"),
                    "--index-dir", str(tmp_path / "index"), "--splits-dir", str(tmp_path / "splits"),
                    "--root", str(root), "--stage-dir", str(stage_dir), "--name", "videos-1a2b3c4d",
                    "--out", str(out))  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    assert done.stdout == (
        f"stage: the plan's launcher is local: every role runs on this machine and reads the data root {root} where "
        f"it is, nothing to stage\nstaged data written to {out}\n"
    )
    assert json.loads(out.read_text()) == {"version": 1, "storage": "shared"} and not read_staged(out).local
    (stage_dir / "videos-1a2b3c4d").mkdir(parents=True)
    (stage_dir / "videos-1a2b3c4d" / ".clipflow-staged.json").write_text('{"version": 1, "files": {}}')
    done = clipflow("cluster", "unstage", "--plan", str(plan), "--stage-dir", str(stage_dir))
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    assert done.stdout == (
        "unstage: the plan's launcher is local: every role runs on this machine and reads the data where it is, so "
        "clipflow cluster stage copied nothing for it: nothing to unstage; to remove data staged for an ssh plan, "
        "give that plan\n"
    )
    assert (stage_dir / "videos-1a2b3c4d" / ".clipflow-staged.json").is_file()  # not this plan's to remove
    with pytest.raises(ClipflowError) as err:  # the hosts of a plan with no ssh key are not reached over ssh
        check_plan(Plan.read(plan), [], 1.0, tmp_path / "checks.json")
    assert str(err.value) == (
        "the cluster plan's launcher is local, whose roles are not reached over ssh: this command works on an ssh "
        "plan's hosts (clipflow cluster plan --launcher ssh, or cluster.launcher: ssh)"
    )


def test_a_slurm_plan_stages_nothing_and_is_not_reached_over_ssh(tmp_path: Path) -> None:
    plan = make_plan("slurm", [Host("node1"), Host("node2")], 2, 1, 9091, 30.0, "none")
    lines: list[str] = []
    out = tmp_path / "staged.json"
    summary = stage_data(plan, tmp_path / "checks.json", tmp_path, tmp_path, tmp_path / "videos", "~/stage", "v",
                         out, log=lines.append)  # fmt: skip
    assert summary == {"version": 1, "storage": "shared"} and json.loads(out.read_text()) == summary
    assert lines == [f"stage: the plan's launcher is slurm: every role reads the data root {tmp_path / 'videos'} "
                     "where it is, nothing to stage"]  # fmt: skip
    assert unstage(plan, "~/stage", log=lines.append) == {}
    assert lines[1].startswith("unstage: the plan's launcher is slurm: every role reads the data where it is, so ")
    with pytest.raises(ClipflowError) as err:
        check_plan(plan, [], 1.0, tmp_path / "checks.json")
    assert str(err.value).startswith("the cluster plan's launcher is slurm, whose roles are not reached over ssh")
    assert not (tmp_path / "checks.json").exists()
