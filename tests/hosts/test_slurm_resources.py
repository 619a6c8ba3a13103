"""The Slurm resources of the train and evaluate jobs, from the validated config (clipflow.hosts.slurm_resources);
the jobs they make on a real cluster are in tests/workflow/test_slurm.py."""

from __future__ import annotations

import pytest

from clipflow.errors import ClipflowError
from clipflow.hosts.slurm_resources import check_notice, job_resources, time_limit_minutes
from clipflow.schemas import validate


def cluster(**settings) -> dict:
    """The cluster section of a validated config (the schema's defaults filled in) with ``settings``."""
    return validate({"cluster": {"launcher": "slurm", **settings}}, "config.schema.yaml", "config")["cluster"]


def test_nodes_tasks_and_the_notice_follow_the_hosts_and_cluster_slurm():
    got = job_resources(cluster(hosts=["a1 slots=2", "a2", "a3 slots=2"], slurm={"gpus_per_node": 2}), notice=True)
    assert (got["nodes"], got["tasks"], got["cpus_per_task"], got["runtime"]) == (3, 6, 4, 720)
    assert got["slurm_extra"].split() == ["--nodelist=a1,a2,a3", "--ntasks-per-node=2", "--signal=USR1@300"]
    assert (got["gres"], got["tasks_per_gpu"], got["mpi"]) == ("gpu:2", 0, "srun")
    assert "slurm_partition" not in got  # the cluster's default


def test_evaluate_has_no_notice_and_a_partition_and_limit_given_are_asked_for():
    settings = {"partition": "gpu", "time_limit": 30, "notice_s": 120, "cpus_per_task": 1}
    got = job_resources(cluster(hosts=["b1", "b2"], slurm=settings), notice=False)
    assert (got["slurm_partition"], got["runtime"], got["cpus_per_task"], got["tasks"]) == ("gpu", 30, 1, 2)
    assert "--signal" not in got["slurm_extra"] and "gres" not in got


def test_a_one_task_job_is_no_mpi_job_and_other_launchers_ask_for_nothing():
    assert "mpi" not in job_resources(cluster(hosts=["c1"]), notice=True)
    assert job_resources({**cluster(hosts=["c1"]), "launcher": "ssh"}, notice=True) == {}


@pytest.mark.parametrize("host", ["localhost", "root@n1", "n1:2222"])
def test_a_host_that_is_no_slurm_node_is_refused_naming_it(host):
    with pytest.raises(ClipflowError, match=f"cluster.hosts names {host}, not a Slurm node"):
        job_resources(cluster(hosts=[host]), notice=True)


def test_a_hosts_file_with_the_slurm_launcher_is_refused_naming_it():
    with pytest.raises(ClipflowError, match="cluster.hosts_file \\(nodes.txt\\) is set with cluster.launcher slurm"):
        job_resources(cluster(hosts_file="nodes.txt"), notice=True)


@pytest.mark.parametrize(
    ("given", "minutes"),
    [(720, 720), ("720", 720), ("12:00:00", 720), ("30:30", 31), ("0:30", 1), ("1-0", 1440), ("1-12", 2160),
     ("1-12:30", 2190), ("1-12:30:01", 2191), ("1:90:00", 150)],
)  # fmt: skip
def test_a_time_limit_is_read_in_slurms_formats_as_slurm_reads_it(given, minutes):
    assert time_limit_minutes(given) == minutes


@pytest.mark.parametrize("given", ["43200s", "12h", "UNLIMITED", "1-2-3", "1:2:3:4", "0:00", "-5", 0, 1.5, True])
def test_anything_else_is_refused_naming_the_key_and_the_formats(given):
    with pytest.raises(ClipflowError) as err:
        time_limit_minutes(given)
    assert str(err.value) == (
        f"config: cluster.slurm.time_limit {given!r} is not a Slurm time limit of a minute or more; give minutes "
        "(720), minutes:seconds, hours:minutes:seconds (12:00:00), days-hours, days-hours:minutes or "
        "days-hours:minutes:seconds (1-12:00:00)"
    )


@pytest.mark.parametrize(
    ("time_limit", "notice_s", "stop_grace", "message"),
    [
        (10, 600, 60, "config: cluster.slurm.notice_s 600 is not shorter than cluster.slurm.time_limit 10 min (600 s): "
         "the notice would come before the job starts; give notice_s below 600, or 0 for no notice"),
        (720, 30, 60, "config: cluster.slurm.notice_s 30 is not longer than train.stop_grace 60: Slurm would end the "
         "job before the workers' stop and checkpoint on notice is done; give notice_s above 60 plus a step, or 0 "
         "for no notice"),
        (720, 90, 90.5, "config: cluster.slurm.notice_s 90 is not longer than train.stop_grace 90.5: Slurm would end "
         "the job before the workers' stop and checkpoint on notice is done; give notice_s above 90.5 plus a step, "
         "or 0 for no notice"),
    ],
)  # fmt: skip
def test_a_notice_after_the_start_and_longer_than_the_grace_is_required(time_limit, notice_s, stop_grace, message):
    settings = cluster(hosts=["a1"], slurm={"time_limit": time_limit, "notice_s": notice_s})
    with pytest.raises(ClipflowError) as err:
        check_notice(settings, stop_grace)
    assert str(err.value) == message
    check_notice({**settings, "slurm": {**settings["slurm"], "notice_s": 0}}, stop_grace)  # 0: no notice at all
    check_notice({**settings, "launcher": "ssh"}, stop_grace)  # the notice is the Slurm launcher's
