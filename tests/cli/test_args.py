"""Counts, ports, timeouts and sizes out of range on the command line, and plans whose hosts cannot reach each
other: each refused by the command that takes it with one line naming the flag and the value (issue 17)."""

from __future__ import annotations

import pytest
from helpers import assert_refused, clipflow

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import hosts_from_config
from clipflow.hosts.plan import make_plan


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--num-workers", "0"], ["--num-workers", "'0'", ">= 1"]),
        (["--num-workers", "-3"], ["--num-workers", "'-3'"]),
        (["--num-servers", "0"], ["--num-servers", "'0'"]),
        (["--num-workers", "two"], ["--num-workers", "'two'"]),
        (["--root-port", "70000"], ["--root-port", "'70000'", "1024-65535"]),
        (["--root-port", "0"], ["--root-port", "'0'"]),
        (["--root-port", "80"], ["--root-port", "'80'", "only root may listen"]),
        (["--heartbeat-timeout", "0"], ["--heartbeat-timeout", "'0'", "> 0"]),
        (["--heartbeat-timeout", "-5"], ["--heartbeat-timeout", "'-5'"]),
        (["--heartbeat-timeout", "nan"], ["--heartbeat-timeout", "'nan'"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and value[0].startswith("--") else "",
)
def test_cluster_plan_refuses_a_setting_out_of_range(tmp_path, flags, names):
    done = clipflow("cluster", "plan", *flags, "--out", str(tmp_path / "plan.json"))
    line = assert_refused(done, "cluster plan", *names)
    assert "usage:" not in done.stderr, line
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize(
    ("hosts", "where"),
    [("localhost,192.0.2.10", "the scheduler's host, localhost"), ("192.0.2.10,127.0.0.1", "a host, 127.0.0.1")],
)
def test_cluster_plan_refuses_a_loopback_host_beside_remote_ones(tmp_path, hosts, where):
    done = clipflow("cluster", "plan", "--launcher", "ssh", "--hosts", hosts, "--out", str(tmp_path / "plan.json"))
    assert_refused(done, "cluster.hosts", where, "loopback", "192.0.2.10")
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["-n", "1", "--port", "70000"], ["--port", "'70000'", "1024-65535"]),
        (["-n", "0"], ["--num-workers", "'0'"]),
        (["-n", "1", "-s", "0"], ["--num-servers", "'0'"]),
        (["-n", "1", "--heartbeat-timeout", "inf"], ["--heartbeat-timeout", "'inf'"]),
        (["-n", "1", "--grace", "-1"], ["--grace", "'-1'"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and value[0].startswith("-") else "",
)
def test_launch_refuses_a_setting_out_of_range(tmp_path, flags, names):
    done = clipflow("launch", *flags, "--log-dir", str(tmp_path / "logs"), "--", "true")
    assert_refused(done, "launch", *names)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["splits", "--list", "x.lst", "--num-workers", "0", "--out-dir", "s"], ["splits", "--num-workers", "'0'"]),
        (["data", "synth", "--out-dir", "d", "--num-train", "2"], ["data synth", "--num-train", "'2'", ">= 8"]),
        (["data", "synth", "--out-dir", "d", "--workers", "0"], ["data synth", "--workers", "'0'"]),
        (["data", "cifar-synth", "--out-dir", "d", "--num-val", "0"], ["data cifar-synth", "--num-val", "'0'"]),
        (
            [
                "data",
                "scan",
                "--train-list",
                "a",
                "--val-list",
                "b",
                "--root",
                "r",
                "--out-dir",
                "o",
                "--num-classes",
                "0",
            ],
            ["data scan", "--num-classes", "'0'"],
        ),
        (
            ["data", "reencode", "--list", "a", "--root", "r", "--out-root", "o", "--crf", "60"],
            ["data reencode", "--crf", "'60'", "0-51"],
        ),
        (["data", "reencode", "--list", "a", "--root", "r", "--out-root", "o", "--gop", "0"], ["--gop", "'0'"]),
        (
            ["data", "reencode", "--list", "a", "--root", "r", "--out-root", "o", "--frame-step", "0"],
            ["--frame-step", "'0'"],
        ),
        (["data", "frames", "x.lst", "--recipe", "slowfast_tiny_synthetic", "--epoch", "0"], ["--epoch", "'0'"]),
        (["cluster", "check", "--plan", "p", "--out", "o", "--min-free-gb", "-1"], ["--min-free-gb", "'-1'"]),
        (
            ["cluster", "check", "--plan", "p", "--out", "o", "--link-check-s", "0"],
            ["--link-check-s", "'0'", "at most 5"],
        ),
        (
            ["cluster", "check", "--plan", "p", "--out", "o", "--link-check-s", "6"],
            ["--link-check-s", "'6'", "at most 5"],
        ),
        (["cluster", "check", "--plan", "p", "--out", "o", "--link-check-s", "nan"], ["--link-check-s", "'nan'"]),
        (["cluster", "check", "--plan", "p", "--out", "o", "--link-check", "no"], ["unrecognized arguments: no"]),
        (["train", "worker", "--job", "j", "--rank", "-1"], ["train worker", "--rank", "'-1'"]),
        (["train", "launch", "--job", "j", "--compression-threshold", "nan"], ["--compression-threshold", "'nan'"]),
        (["train", "launch", "--job", "j", "--compression-threshold", "0"], ["--compression-threshold", "'0'"]),
        (["evaluate", "worker", "--job", "j", "--rank", "x"], ["evaluate worker", "--rank", "'x'"]),
        (["models", "list", "--num-classes", "0"], ["models", "--num-classes", "'0'"]),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) and not value[0].startswith("'") else "",
)
def test_other_commands_refuse_counts_out_of_range(tmp_path, monkeypatch, args, names):
    monkeypatch.chdir(tmp_path)
    assert_refused(clipflow(*args), *names)
    assert list(tmp_path.iterdir()) == []  # refused before writing anything


def test_a_command_line_mistake_is_one_line_too():
    done = clipflow("cluster", "plan")
    assert_refused(done, "cluster plan", "--out", "clipflow cluster plan --help")
    assert_refused(clipflow("frobnicate"), "'frobnicate'", "invalid choice")


@pytest.mark.parametrize(
    ("workers", "servers", "port", "timeout", "name"),
    [
        (0, 1, 9100, 30, "cluster.num_workers"),
        (1, -1, 9100, 30, "cluster.num_servers"),
        (1, 1, 70000, 30, "cluster.root_port"),
        (1, 1, 9100, float("nan"), "cluster.heartbeat_timeout"),
        (1, 1, 9100, 0, "cluster.heartbeat_timeout"),
    ],
)
def test_make_plan_refuses_settings_out_of_range_from_any_caller(workers, servers, port, timeout, name):
    with pytest.raises(ClipflowError, match=rf"^{name} must be"):
        make_plan("local", hosts_from_config(["localhost"]), workers, servers, port, timeout, "none")
