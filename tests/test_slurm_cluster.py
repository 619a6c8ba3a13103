"""The real Slurm cluster the Slurm tests run on (tests/slurm_cluster.py): three nodes that each answer with their
own name and network address, and nothing left behind by a job."""

from __future__ import annotations

import sys

import pytest
from slurm_helpers import slurm_env

pytestmark = [pytest.mark.hosts, pytest.mark.slurm]


def test_a_step_on_every_node_answers_with_that_nodes_name_and_address(slurm):
    done = slurm.run(["srun", "--nodes=3", "--ntasks-per-node=1", "--label", "sh", "-c",
                      "echo $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}') $SLURM_NODEID"])  # fmt: skip
    answers = sorted(line.split(": ", 1)[1] for line in done.stdout.splitlines())
    expected = sorted(f"{node} {slurm.address[node]}/24 {i}" for i, node in enumerate(slurm.nodes))
    assert answers == expected
    slurm.wait_quiet()


def test_node_names_resolve_inside_a_job_as_a_clusters_dns_would(slurm):
    done = slurm.run(["srun", "--nodes=1", "--nodelist=n2", "getent", "hosts", "n1", "n3"])
    assert done.stdout.split() == [slurm.address["n1"], "n1", slurm.address["n3"], "n3"]
    slurm.wait_quiet()


def test_a_worker_on_a_node_names_the_interface_of_its_node_name_for_gloo_and_nccl(slurm):
    """With the slurm launcher a worker's plan address is its node name, resolved on the node."""
    script = (
        "import os; from clipflow.train.interface import choose_interface; "
        "print(choose_interface(os.environ, 'gloo'), choose_interface(os.environ, 'nccl'), "
        "os.environ['GLOO_SOCKET_IFNAME'], os.environ['NCCL_SOCKET_IFNAME'])"
    )
    env = slurm_env(slurm)
    env["CLIPFLOW_NODE_ADDRESS"] = "n3"
    done = slurm.run(["srun", "--nodes=1", "--nodelist=n3", sys.executable, "-c", script], env=env)
    assert done.stdout.split() == ["eth0"] * 4
    slurm.wait_quiet()
