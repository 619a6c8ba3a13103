"""The Slurm resources of the train and evaluate jobs, from the validated config (clipflow.hosts.slurm_resources);
the jobs they make on a real cluster are in tests/workflow/test_slurm.py."""

from __future__ import annotations

import pytest

from clipflow.errors import ClipflowError
from clipflow.hosts.slurm_resources import job_resources
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
