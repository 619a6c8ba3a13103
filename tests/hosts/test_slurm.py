"""The parts of the slurm launcher that need no controller: the node list expansion, the allocation read from
Slurm's variables, the srun command line, and the refusals made before any step starts (a hosts file with the
slurm launcher, srun missing). The launcher running for real on a Slurm cluster is in tests/launch/test_slurm.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_refused, python_env

from clipflow.errors import ClipflowError
from clipflow.hosts.slurm import SlurmAllocation, allocation_from_env, expand_nodelist, srun_argv
from clipflow.launch.slurm_deadline import parse_time_left


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


def test_a_hosts_file_with_the_slurm_launcher_is_refused(tmp_path: Path):
    hosts = tmp_path / "hosts"
    hosts.write_text("gpu01\ngpu02\n")
    env = {**python_env(), **slurm_env(PATH=python_env()["PATH"])}
    for argv in (
        ["cluster", "plan", "--launcher", "slurm", "--hosts-file", str(hosts), "--out", str(tmp_path / "plan.json")],
        ["launch", "--launcher", "slurm", "-H", str(hosts), "-n", "2", "--", "true"],
    ):
        done = subprocess.run([sys.executable, "-m", "clipflow", *argv], env=env, capture_output=True, text=True)
        assert_refused(done, f"a hosts file ({hosts})", "slurm launcher", "use the ssh launcher")
    assert not (tmp_path / "plan.json").exists()


def test_the_slurm_launcher_without_srun_on_path_is_refused_before_any_role_starts(tmp_path: Path):
    bare = tmp_path / "bin"  # a PATH with this Python and no Slurm commands
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    env = {**python_env(), **slurm_env(SLURM_JOB_NODELIST="n1", PATH=str(bare)), "CLIPFLOW_NO_PROGRESS": "1"}
    argv = [sys.executable, "-m", "clipflow", "launch", "--launcher", "slurm", "-n", "1", "--log-dir", str(tmp_path)]
    done = subprocess.run([*argv, "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert_refused(done, "needs srun, which is not on PATH", "slurm-client", "--launcher ssh")
    assert not list(tmp_path.glob("*.log"))  # no role was started


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0:45", 45.0), ("12:05", 725.0), ("1:00:00", 3600.0), ("2-03:04:05", 183845.0), ("UNLIMITED", None),
     ("NOT_SET", None)],
)  # fmt: skip
def test_the_time_left_as_squeue_gives_it(text, seconds):
    assert parse_time_left(text) == seconds


def test_a_time_left_squeue_never_gives_is_named():
    with pytest.raises(ClipflowError, match=re.escape("squeue gave the job's time left as 'soon'")):
        parse_time_left("soon")
