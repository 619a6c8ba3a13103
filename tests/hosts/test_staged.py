"""The staging record (staged.json) as train, evaluate and collect read it, and the storage decision from the
hosts' answers: broken records refused by name, a decision for every kind of answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_refused, python_env

from clipflow.cluster.checks import HostCheck
from clipflow.cluster.storage_decision import StorageMarker, decide_storage
from clipflow.errors import ClipflowError
from clipflow.hosts.staged import read_staged, staging_name
from clipflow.launch.start import HostRun


def write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_local_record_gives_the_hosts_root_and_a_shared_one_no_host_run(tmp_path: Path) -> None:
    hosts = {"root@a": {"root": "~/clipflow-stage/x-1"}, "root@b": {"root": "~/clipflow-stage/x-1"}}
    local = write(tmp_path / "local.json", {"version": 1, "storage": "local", "hosts": hosts})
    run = HostRun.of(str(local), "~/clipflow-jobs/r")
    assert run is not None and run.folder == "~/clipflow-jobs/r" and run.staged.root() == "~/clipflow-stage/x-1"
    run.staged.check_hosts(["root@a", "root@b"], "train launch")
    with pytest.raises(ClipflowError, match=r"train launch: no data staged on root@c .*rerun the staging stage"):
        run.staged.check_hosts(["root@a", "root@c"], "train launch")
    assert HostRun.of(str(write(tmp_path / "shared.json", {"version": 1, "storage": "shared"})), "") is None
    assert HostRun.of("", "~/x") is None  # no staging (local launcher, image data): the run as before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "staging record"),
        ({"version": 1, "storage": "nfs"}, "not one `clipflow cluster stage` wrote"),
        ({"version": 1, "storage": "local"}, "not one `clipflow cluster stage` wrote"),
        ({"version": 1, "storage": "local", "hosts": {"root@a": {"bytes": 3}}}, "not one `clipflow cluster stage`"),
    ],
    ids=["not JSON", "unknown storage", "no hosts", "a host without its root"],
)
def test_a_broken_record_is_refused_naming_it(tmp_path: Path, data: object, message: str) -> None:
    path = write(tmp_path / "staged.json", data)
    with pytest.raises(ClipflowError, match=message) as caught:
        read_staged(path)
    assert str(path) in str(caught.value)


def test_roots_that_differ_between_hosts_and_a_missing_host_dir_are_refused(tmp_path: Path) -> None:
    hosts = {"root@a": {"root": "~/stage/x"}, "root@b": {"root": "/data/stage/x"}}
    path = write(tmp_path / "staged.json", {"version": 1, "storage": "local", "hosts": hosts})
    with pytest.raises(ClipflowError, match="staged data roots differ between the hosts"):
        read_staged(path).root()
    with pytest.raises(ClipflowError, match="says storage local: give --host-dir"):
        HostRun.of(str(path), "")


def test_train_launch_refuses_a_broken_staging_record_before_anything_starts(tmp_path: Path) -> None:
    bad = write(tmp_path / "staged.json", "[1, 2]")
    argv = ["train", "launch", "--log-dir", str(tmp_path / "logs"), "--staged", str(bad)]
    done = subprocess.run([sys.executable, "-m", "clipflow", *argv], env=python_env(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert_refused(done, str(bad), "staging record")
    assert not (tmp_path / "logs").exists()


def test_the_staging_folder_is_named_by_the_data_set_and_its_root() -> None:
    first = staging_name("results/data/kinetics400", "/srv/videos")
    assert first.startswith("kinetics400-") and first == staging_name("results/data/kinetics400/", "/srv/videos")
    assert first != staging_name("results/data/kinetics400", "/srv/other-videos")


def answered(seen: bool, wrote: bool, why: str = "") -> HostCheck:
    return HostCheck("root@h", facts={"marker": {"seen": seen, "wrote": wrote, "why": why}})


def test_the_storage_follows_the_hosts_answers(tmp_path: Path) -> None:
    with StorageMarker(tmp_path) as marker:
        for index in range(2):  # both hosts answered beside the marker: this folder is theirs too
            Path(f"{marker.path}.h{index}").write_text(marker.token)
        shared = decide_storage("auto", marker, [answered(True, True), answered(True, True)])
        assert shared.mode == "shared" and str(tmp_path) in shared.reason
        blind = [answered(True, True), answered(False, False, "No such file or directory")]
        decided = decide_storage("auto", marker, blind)
        assert decided.mode == "local" and "it does not see" in decided.reason and "No such file" in decided.reason
        Path(f"{marker.path}.h1").unlink()  # an answer written on a copy of the folder never shows up here
        copy = decide_storage("auto", marker, [answered(True, True), answered(True, True)])
        assert copy.mode == "local" and "does not appear here" in copy.reason
        checks = [answered(True, True), answered(True, False, "cannot write beside it: Read-only file system")]
        assert decide_storage("shared", marker, checks).mode == "shared"
        assert not checks[1].ok and "cluster.storage is shared, but it sees" in checks[1].problems[0]
        assert decide_storage("local", marker, []).mode == "local"
    assert not list(tmp_path.iterdir())  # the marker and the answers are removed
