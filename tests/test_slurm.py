"""There is no Slurm controller on this machine, so these tests check the commands and environment the
launcher would hand to srun (a mock of the controller is impossible to avoid): the node list expansion,
the allocation read from Slurm's variables, and the srun command line. A stand-in `srun` script records
what a real one would receive, to show that values travel in the environment and not in argv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clipflow.cluster.slurm import SlurmAllocation, allocation_from_env, expand_nodelist, srun_argv
from clipflow.errors import ClipflowError


@pytest.mark.parametrize(
    ("spec", "nodes"),
    [
        ("node01", ["node01"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[01-03,07],gpu[1-2]", ["node01", "node02", "node03", "node07", "gpu1", "gpu2"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a,b[3],c", ["a", "b3", "c"]),
        ("gpu[1-2]x", ["gpu1x", "gpu2x"]),
    ],
)
def test_expand_nodelist(spec, nodes):
    assert expand_nodelist(spec) == nodes


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("node[01-03", "'[' is not closed by ']'"),
        ("node01-03]", "']' without '['"),
        ("node[[1-2]]", "'[' inside brackets"),
        ("node[03-01]", "the range '03-01' runs backwards"),
        ("node[]", "empty brackets '[]'"),
        ("node[a-c]", "'a-c' in brackets is not a number or a range a-b"),
        ("node[1-]", "'1-' in brackets is not a number or a range a-b"),
        ("node1,,node2", "an empty name between commas"),
    ],
)
def test_malformed_nodelist_names_the_spec(spec, problem):
    expected = f"Slurm node list {spec!r}: {problem}; expected a hostlist such as"
    with pytest.raises(ClipflowError, match=re.escape(expected)):
        expand_nodelist(spec)


def slurm_env(**extra: str) -> dict[str, str]:
    """What Slurm sets in a batch job on three GPU nodes (a subset; the launcher reads these)."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "clipflow-train",
        "SLURM_JOB_NODELIST": "gpu[01-03]",
        "SLURM_NODELIST": "gpu[01-03]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_CPUS_ON_NODE": "32",
        "SLURM_JOB_CPUS_PER_NODE": "32(x3)",
        "SLURM_SUBMIT_DIR": "/home/alice/clipflow",
        "PATH": "/usr/bin:/bin",
    }
    env.update(extra)
    return env


def test_allocation_from_env():
    assert allocation_from_env(slurm_env()) == SlurmAllocation(
        job_id="4242", nodes=["gpu01", "gpu02", "gpu03"], cpus_per_node=32
    )


def test_allocation_falls_back_to_slurm_nodelist_and_optional_cpus():
    env = slurm_env(SLURM_NODELIST="cpu[7-8]")
    del env["SLURM_JOB_NODELIST"], env["SLURM_CPUS_ON_NODE"]
    assert allocation_from_env(env) == SlurmAllocation(job_id="4242", nodes=["cpu7", "cpu8"], cpus_per_node=None)


def test_outside_an_allocation():
    message = (
        "not inside a Slurm allocation (SLURM_JOB_ID is not set): run the launcher from sbatch or salloc, "
        "or use --launcher ssh"
    )
    with pytest.raises(ClipflowError, match=re.escape(message)):
        allocation_from_env({"PATH": "/usr/bin", "HOME": "/home/alice"})


def test_missing_nodelist_names_the_variable():
    env = slurm_env()
    del env["SLURM_JOB_NODELIST"], env["SLURM_NODELIST"]
    with pytest.raises(ClipflowError, match=re.escape("SLURM_JOB_ID=4242 is set but SLURM_JOB_NODELIST")):
        allocation_from_env(env)


def test_malformed_nodelist_names_the_variable():
    with pytest.raises(ClipflowError, match=re.escape("SLURM_JOB_NODELIST='gpu[01-03' from Slurm cannot be read")):
        allocation_from_env(slurm_env(SLURM_JOB_NODELIST="gpu[01-03"))


def test_bad_cpus_names_the_variable():
    with pytest.raises(ClipflowError, match=re.escape("SLURM_CPUS_ON_NODE='lots' is not a whole number >= 1")):
        allocation_from_env(slurm_env(SLURM_CPUS_ON_NODE="lots"))


ROLE_ARGV = [sys.executable, "-m", "clipflow", "train", "worker"]


def test_srun_argv_exact():
    assert srun_argv("gpu02", ROLE_ARGV, job_name="clipflow-worker-1") == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=gpu02",
        "--overlap",
        "--kill-on-bad-exit=1",
        "--export=ALL",
        "--job-name=clipflow-worker-1",
        "--unbuffered",
        *ROLE_ARGV,
    ]


def test_srun_argv_default_job_name():
    assert "--job-name=clipflow" in srun_argv("gpu01", ["true"])


@pytest.mark.parametrize("node", ["", "gpu[01-02]", "gpu01,gpu02", "gpu 01"])
def test_srun_argv_takes_one_node(node):
    with pytest.raises(ClipflowError, match=re.escape(f"srun: node {node!r} is not one node name")):
        srun_argv(node, ["true"])


def test_srun_argv_needs_a_command():
    with pytest.raises(ClipflowError, match="srun: no command given for node gpu01"):
        srun_argv("gpu01", [])


FAKE_SRUN = """\
import json, os, sys
json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, open(os.environ["FAKE_SRUN_RECORD"], "w"))
"""


def test_secret_travels_in_environment_not_in_argv(tmp_path: Path):
    secret = "curve-secret-9f8e7d6c5b4a"
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\n{FAKE_SRUN}")
    fake.chmod(0o755)
    record = tmp_path / "record.json"
    env = slurm_env(
        PATH=f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        FAKE_SRUN_RECORD=str(record),
        DMLC_ROLE="worker",
        DMLC_PS_ROOT_URI="gpu01",
        CLIPFLOW_PS_SECRET=secret,
    )
    argv = srun_argv("gpu02", ROLE_ARGV)
    assert not any(secret in arg for arg in argv)
    subprocess.run(argv, env=env, check=True, timeout=30)
    seen = json.loads(record.read_text())
    assert seen["argv"] == argv[1:]
    assert not any(secret in arg for arg in seen["argv"])
    assert seen["env"]["CLIPFLOW_PS_SECRET"] == secret
    assert seen["env"]["DMLC_ROLE"] == "worker"
