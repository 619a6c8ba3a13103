"""Bad config and recipe settings, refused while Snakemake reads the workflow (`snakemake -n`), before any stage
runs; and nested `--config` values typed as config.yaml's would be (issue 17)."""

from __future__ import annotations

import re

import pytest
from config_helpers import assert_workflow_refused, dry_run
from helpers import copy_workflow

from clipflow.errors import ClipflowError
from clipflow.schemas import typed_command_line


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ("overrides={train: {base_lr: .nan}}", ["overrides.train.base_lr", "nan is not a finite number"]),
        ("overrides={train: {momentum: -.inf}}", ["overrides.train.momentum", "-inf is not a finite number"]),
        ("overrides={data: {input_size: 500}}", ["data.input_size 500", "84x64"]),
        ("overrides={data: {new_length: 100000}}", ["data.new_length", "100000", "maximum of 1024"]),
        ("overrides={data: {new_length: 200}}", ["data.new_length 200", "data.synthetic.max_frames", "120"]),
        ("run=..", ["run", "'..'", "results/"]),
        ("run=../elsewhere", ["run", "'../elsewhere'"]),
        ("recipe=../recipes/slowfast_tiny_synthetic", ["recipe", "'../recipes/slowfast_tiny_synthetic'"]),
        ("cluster={num_workers: 0}", ["cluster.num_workers", "0 is less than the minimum of 1"]),
        ("cluster={num_servers: -1}", ["cluster.num_servers", "-1 is less than the minimum of 1"]),
        ("cluster={root_port: 70000}", ["cluster.root_port", "70000", "1024-65535"]),
        ("cluster={heartbeat_timeout: 0}", ["cluster.heartbeat_timeout", "0"]),
        ("cluster={link_check: maybe}", ["cluster.link_check", "maybe"]),
        ("cluster={link_check_s: 0}", ["cluster.link_check_s", "0", "at most 5"]),
        ("cluster={link_check_s: 60}", ["cluster.link_check_s", "60", "at most 5"]),
        ("data={synthetic: {min_frames: 90, max_frames: 60}}", ["data.synthetic.min_frames 90", "max_frames 60"]),
        ("data={short_videos: drop}", ["data.short_videos", "drop", "keep", "leave_out"]),
        (
            "overrides={train: {multigrid: {long_cycle: true}, accumulate: 2}}",
            ["recipe slowfast_tiny_synthetic", "train.multigrid with train.accumulate 2", "set accumulate: 1"],
        ),
        ("cluster={launcher: ssh, hosts: [localhost, node2]}", ["cluster.hosts", "localhost", "loopback", "node2"]),
        ("cluster={num_workers: 70000}", ["cluster.num_workers 70000", "on localhost", "at most 32256 on one host"]),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_bad_setting_is_refused_before_any_stage(workflow, config, names):
    assert_workflow_refused(dry_run(workflow, "--config", config), *names)


def test_a_non_finite_number_in_a_config_file_is_refused(workflow, tmp_path):
    (tmp_path / "nan.yaml").write_text("overrides:\n  train:\n    base_lr: .NaN\n")
    done = dry_run(workflow, "--configfile", str(tmp_path / "nan.yaml"))
    assert_workflow_refused(done, "overrides.train.base_lr", "nan")


def test_a_number_yaml_1_1_reads_otherwise_in_a_config_file_is_refused_as_typed(workflow, tmp_path):
    (tmp_path / "hex.yaml").write_text("cluster:\n  num_workers: 0x10\n")
    done = dry_run(workflow, "--configfile", str(tmp_path / "hex.yaml"))
    assert_workflow_refused(done, "cluster.num_workers: '0x10' is not of type 'integer'")


def test_nested_config_values_arrive_typed_at_the_stages(workflow):
    done = dry_run(workflow, "--config", "overrides={train: {epochs: 1, base_lr: 1e-3}}", "cluster={num_workers: 3}")
    assert done.returncode == 0, done.stdout + done.stderr
    train = next(line for line in done.stdout.splitlines() if "clipflow train launch" in line)
    assert """--overrides '{"train": {"base_lr": 0.001, "epochs": 1}}'""" in train
    splits = next(line for line in done.stdout.splitlines() if "clipflow splits" in line)
    assert re.search(r"--num-workers 3\b", splits)


def test_typed_command_line_reads_nested_strings_as_their_schema_wants():
    # what Snakemake's --config hands over: every value inside a mapping a string
    given = {
        "run": 2024,
        "overrides": {"train": {"epochs": "1", "nesterov": "true", "base_lr": "1e-3"}, "data": {"decoder": "pyav"}},
        "cluster": {"num_workers": "2", "hosts": ["localhost"], "root_port": "9100", "heartbeat_timeout": "7.5"},
        "data": {"reencode": {"size": "null"}},
    }
    assert typed_command_line(given) == {
        "run": "2024",
        "overrides": {"train": {"epochs": 1, "nesterov": True, "base_lr": 0.001}, "data": {"decoder": "pyav"}},
        "cluster": {"num_workers": 2, "hosts": ["localhost"], "root_port": 9100, "heartbeat_timeout": 7.5},
        "data": {"reencode": {"size": None}},
    }


def test_typed_command_line_leaves_a_word_where_a_number_is_wanted_for_validation_to_name():
    from clipflow.schemas import validate

    typed = typed_command_line({"cluster": {"num_workers": "two"}, "bogus": "1"})
    assert typed == {"cluster": {"num_workers": "two"}, "bogus": "1"}
    with pytest.raises(ClipflowError, match=r"cluster\.num_workers: 'two' is not of type 'integer'"):
        validate({"cluster": typed["cluster"]}, "config.schema.yaml", "config")
