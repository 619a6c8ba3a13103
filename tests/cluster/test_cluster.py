"""Cluster preparation on the launching node: placement, the job's key, the launch command, rsync's options.

What needs real remote hosts (key distribution, host keys, checks, the ssh launcher)
is in tests/cluster/test_cluster_hosts.py, on sshd hosts in network namespaces.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from disk_helpers import files_on, fill, full_message
from helpers import assert_refused, clipflow, free_port, python_env

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host, hosts_from_config
from clipflow.hosts.keys import ensure_local_key, public_key
from clipflow.hosts.plan import make_plan, place
from clipflow.hosts.ssh import SshSettings, ssh_options
from clipflow.hosts.sync import EXCLUDES, rsync_argv


def _placed(hosts: list[Host], workers: int, servers: int, how: str) -> list[tuple[str, int, str]]:
    return [(role, rank, h.host) for role, rank, h in place(hosts, workers, servers, how)]


def test_beside_puts_a_server_beside_each_worker_and_honours_slots() -> None:
    hosts = hosts_from_config(["a", "b slots=2", "c"])
    assert _placed(hosts, 4, 3, "beside") == [
        ("scheduler", 0, "a"),
        ("server", 0, "a"),
        ("server", 1, "b"),
        ("server", 2, "c"),
        ("worker", 0, "a"),
        ("worker", 1, "b"),
        ("worker", 2, "b"),
        ("worker", 3, "c"),
    ]


def test_cycle_is_mxnet_launch_order() -> None:
    hosts = hosts_from_config(["a", "b", "c"])
    assert _placed(hosts, 2, 2, "cycle") == [
        ("scheduler", 0, "a"),
        ("server", 0, "a"),
        ("server", 1, "b"),
        ("worker", 0, "c"),
        ("worker", 1, "a"),
    ]
    with pytest.raises(ClipflowError, match="cluster.placement must be one of beside, cycle, not 'random'"):
        place(hosts, 1, 1, "random")


def test_plan_records_each_roles_address_and_refuses_unknown_hosts(tmp_path: Path) -> None:
    plan = make_plan("ssh", hosts_from_config(["root@127.0.0.1:2222", "localhost"]), 2, 2, 9100, 30, "none")
    assert [(r.role, r.host, r.address) for r in plan.roles][:3] == [
        ("scheduler", "root@127.0.0.1:2222", "127.0.0.1"),
        ("server", "root@127.0.0.1:2222", "127.0.0.1"),
        ("server", "localhost", "127.0.0.1"),
    ]
    with pytest.raises(ClipflowError, match="cannot resolve host 'no-such-host.invalid'"):
        make_plan("ssh", hosts_from_config(["no-such-host.invalid"]), 1, 1, 9100, 30, "none")
    with pytest.raises(ClipflowError, match="the local launcher runs every role on this machine"):
        make_plan("local", hosts_from_config(["10.0.0.1"]), 1, 1, 9100, 30, "none")


def test_a_key_is_made_when_there_is_none_and_too_open_modes_are_fixed(tmp_path: Path) -> None:
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    made = ensure_local_key(key)
    assert made == [f"created {key.parent} (700)", f"made a new ed25519 key pair {key} (+ .pub)"]
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert public_key(key).startswith("ssh-ed25519 ")
    assert ensure_local_key(key) == []  # a second run changes nothing
    key.chmod(0o644)
    key.parent.chmod(0o755)
    fixed = ensure_local_key(key)
    assert fixed == [
        f"{key.parent} had mode 755: now 700",
        f"{key} had mode 644, which ssh refuses ('permissions are too open'): now 600",
    ]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_rsa_on_request_and_bad_keys_are_named(tmp_path: Path) -> None:
    rsa = tmp_path / "rsa" / "id_rsa"
    ensure_local_key(rsa, "rsa")
    assert public_key(rsa).startswith("ssh-rsa ")
    with pytest.raises(ClipflowError, match="cluster.ssh_key_type must be one of ed25519, rsa, not 'dsa'"):
        ensure_local_key(tmp_path / "x", "dsa")
    junk = tmp_path / "junk" / "id_ed25519"
    junk.parent.mkdir(mode=0o700)
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    with pytest.raises(ClipflowError, match=f"{junk} is not a private key clipflow can use unattended"):
        ensure_local_key(junk)
    orphan = tmp_path / "orphan" / "id_ed25519"
    orphan.parent.mkdir(mode=0o700)
    orphan.with_name("id_ed25519.pub").write_text("ssh-ed25519 AAAA x\n")
    with pytest.raises(ClipflowError, match="exists but its private key .* does not"):
        ensure_local_key(orphan)


def test_openssh_and_rsync_use_only_the_job_key_and_the_pinned_host_keys(tmp_path: Path) -> None:
    settings = SshSettings(tmp_path / "id", tmp_path / "known_hosts")
    opts = ssh_options(Host("h", "u", 2222), settings)
    pairs = list(zip(opts, opts[1:], strict=False))
    for pair in (("-p", "2222"), ("-i", str(tmp_path / "id")), ("-o", "StrictHostKeyChecking=yes")):
        assert pair in pairs
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in opts and "IdentitiesOnly=yes" in opts
    argv = rsync_argv(tmp_path, Host("h", "u"), "/srv/job", settings)
    assert argv[-2:] == [f"{tmp_path}/", "u@h:/srv/job/"]
    assert [a for a in argv if a.startswith("--exclude=")] == [f"--exclude={e}" for e in EXCLUDES]
    assert {"/results/", "/logs/", "/.snakemake/", ".venv/"} <= set(EXCLUDES)


def test_launch_runs_the_command_on_every_worker_with_the_env_given(tmp_path: Path) -> None:
    code = (
        "import os, sys; from clipflow.ps import KVStore; kv = KVStore.create('dist_sync'); "
        "print('rank', kv.rank, 'of', kv.num_workers, os.environ['GREETING']); kv.close()"
    )
    done = clipflow(
        "launch", "-n", "2", "-s", "1", "--port", str(free_port()), "--env", "GREETING=hi there",
        "--log-dir", str(tmp_path / "logs"), "--", sys.executable, "-c", code,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[worker 0 localhost] rank 0 of 2 hi there" in done.stdout
    assert "[worker 1 localhost] rank 1 of 2 hi there" in done.stdout
    assert (tmp_path / "logs" / "worker-1.log").read_text().startswith("rank 1 of 2 hi there")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "1", "--env", "NOEQUALS", "--", "true"], "--env 'NOEQUALS': expected NAME=VALUE"),
        (["-n", "1", "--env", "1X=2", "--", "true"], "--env '1X=2': expected NAME=VALUE"),
        (["-n", "1"], "no command to launch"),
        (["-n", "1", "-H", "/nonexistent/hosts", "--", "true"], "/nonexistent/hosts"),
        (["-n", "1", "--launcher", "slurm", "--", "true"], "not inside a Slurm allocation"),
        (
            ["-n", "1", "--mxnet", "--env", "DMLC_ROLE=worker", "--", "true"],
            "clipflow: error: --env DMLC_ROLE: a variable the launcher sets for each role itself, from the plan and "
            "its own flags (-n, -s, --port, --security, --heartbeat-timeout, --log-dir); leave it out of --env, and "
            "set what it holds with those flags\n",
        ),
        (
            ["-n", "2", "--env", "LOCAL_RANK=0", "--env", "DMLC_NUM_WORKER=4", "--env", "OK=1", "--", "true"],
            "--env DMLC_NUM_WORKER, LOCAL_RANK: variables the launcher sets for each role itself, from the plan and "
            "its own flags (-n, -s, --port, --security, --heartbeat-timeout, --log-dir); leave them out of --env, "
            "and set what they hold with those flags",
        ),
    ],
)
def test_launch_refuses_bad_input_with_a_message(args: list[str], message: str, tmp_path: Path) -> None:
    env = {k: v for k, v in python_env().items() if not k.startswith("SLURM_")}  # outside any allocation
    done = subprocess.run(
        [sys.executable, "-m", "clipflow", "launch", "--log-dir", str(tmp_path), *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not list(tmp_path.glob("*.log")), "a role was started"


def test_slurm_roles_start_with_srun_and_carry_their_values_in_the_environment(tmp_path: Path) -> None:
    """No Slurm controller here: this checks the srun command lines and environments the launcher would run."""
    from clipflow.hosts.slurm import allocation_from_env
    from clipflow.launch.roles import role_commands

    alloc = allocation_from_env({"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_CPUS_ON_NODE": "8"})
    hosts = [Host(node) for node in alloc.nodes]
    plan = make_plan("slurm", hosts, 2, 2, 9100, 30, "curve", tmp_path / "keys")
    commands = role_commands(plan, ["python", "train.py"], {"API_TOKEN": "s3cr3t"})
    assert [(c.role.role, c.role.rank, c.argv[3]) for c in commands] == [
        ("scheduler", 0, "--nodelist=gpu01"),
        ("server", 0, "--nodelist=gpu01"),
        ("server", 1, "--nodelist=gpu02"),
        ("worker", 0, "--nodelist=gpu01"),
        ("worker", 1, "--nodelist=gpu02"),
    ]
    worker = commands[-1]
    assert worker.argv[0] == "srun" and "--export=ALL" in worker.argv and worker.argv[-2:] == ["python", "train.py"]
    assert worker.env["DMLC_ROLE"] == "worker" and worker.env["DMLC_RANK"] == "1"
    assert worker.env["API_TOKEN"] == "s3cr3t" and worker.env["CLIPFLOW_PS_SECURITY"] == "curve"
    for command in commands:
        assert not any("s3cr3t" in a or "DMLC_" in a for a in command.argv)  # values only in the environment


def test_stage_progress_lines_and_byte_figures() -> None:
    from clipflow.cluster.stage import HostShare, HostState, human_bytes, progress_line

    figures = [human_bytes(n) for n in (0, 999, 65536, 1_234_567, 9.4e9)]
    assert figures == ["0 B", "999 B", "65.5 kB", "1.2 MB", "9.4 GB"]
    state = HostState(HostShare(Host("10.1.2.12", "root"), "root@10.1.2.12"), copy_bytes=9_400_000)
    state.done_bytes, state.started = 3_100_000, 0.0
    assert progress_line(state, took=2.5) == "stage root@10.1.2.12: 3.1 MB of 9.4 MB (32%), 1.2 MB/s, in 2.5 s"
    state.started = time.monotonic() - 2.5
    line = progress_line(state)
    assert line.startswith("stage root@10.1.2.12: 3.1 MB of 9.4 MB (32%), 1.2 MB/s, ETA 5 s"), line


def test_storage_decision_is_read_or_refused(tmp_path: Path) -> None:
    from clipflow.cluster.storage import StorageDecision, read_storage

    checks = tmp_path / "checks.json"
    checks.write_text('{"ok": true, "storage": {"setting": "auto", "mode": "local", "reason": "no shared root"}}')
    assert read_storage(checks) == StorageDecision("auto", "local", "no shared root")
    for body, words in (('{"ok": true}', "no storage decision"), ('{"storage": {"mode": "nfs"}}', "'nfs'")):
        checks.write_text(body)
        with pytest.raises(ClipflowError, match="rerun the cluster check") as err:
            read_storage(checks)
        assert words in str(err.value) and str(checks) in str(err.value)


def test_staging_on_a_full_disk_is_one_line_and_writes_no_staged_json(tmp_path: Path, small_disk: Path) -> None:
    """Issue 30: the staging record written on a full disk (shared storage: the only file stage writes here)."""
    plan = tmp_path / "plan.json"
    made = clipflow("cluster", "plan", "--num-workers", "1", "--root-port", str(free_port()), "--out", str(plan))
    assert made.returncode == 0, made.stderr
    checks = tmp_path / "checks.json"
    checks.write_text('{"ok": true, "storage": {"setting": "auto", "mode": "shared", "reason": "one root"}}')
    free = fill(small_disk, 0)
    out = small_disk / "staged.json"
    line = assert_refused(clipflow("cluster", "stage", "--plan", str(plan), "--checks", str(checks), "--index-dir",
                                   str(tmp_path), "--splits-dir", str(tmp_path), "--root", str(tmp_path), "--name",
                                   "set", "--out", str(out)))  # fmt: skip
    staged = json.dumps({"version": 1, "storage": "shared"}, indent=2) + "\n"
    assert line == "clipflow: error: " + full_message(out, len(staged), free)
    assert files_on(small_disk) == []
