"""Bad input a user can give the workflow: recipe names, config keys, overrides, CLI arguments."""

import subprocess
import sys

import pytest
from helpers import clipflow, python_env

from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe


def snakemake_dry_run(repo, *config: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "train_slowfast"]
    if config:
        cmd += ["--config", *config]
    return subprocess.run(cmd, cwd=repo, env=python_env(), capture_output=True, text=True, timeout=120)


def test_unknown_recipe_is_named_with_the_known_ones(repo):
    done = snakemake_dry_run(repo, "recipe=slowfast_99x1_resnet7")
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "unknown recipe 'slowfast_99x1_resnet7'" in out
    assert "slowfast_tiny_synthetic" in out


def test_config_key_not_in_schema_is_refused(repo):
    done = snakemake_dry_run(repo, "bogus_key=1")
    assert done.returncode != 0
    assert "bogus_key" in done.stdout + done.stderr


def test_config_value_of_wrong_type_is_refused(repo):
    done = snakemake_dry_run(repo, "cluster={'num_workers': 'two'}")
    assert done.returncode != 0
    assert "'two' is not of type 'integer'" in done.stdout + done.stderr


def test_recipe_override_with_unknown_key_names_it():
    with pytest.raises(ClipflowError, match=r"train: Additional properties are not allowed \('epoks' was unexpected"):
        load_recipe("slowfast_tiny_synthetic", {"train": {"epoks": 3}})


def test_recipe_defaults_are_filled():
    recipe = load_recipe("slowfast_tiny_synthetic", {"train": {"epochs": 2}})
    assert recipe["train"]["epochs"] == 2
    assert recipe["train"]["nesterov"] is False and recipe["data"]["num_segments"] == 1


def test_recipe_decoder_is_pyav_by_default_and_an_unknown_one_is_named():
    assert load_recipe("slowfast_tiny_synthetic")["data"]["decoder"] == "pyav"
    assert load_recipe("slowfast_tiny_synthetic", {"data": {"decoder": "decord"}})["data"]["decoder"] == "decord"
    decoders = r"\['pyav', 'decord', 'torchcodec', 'nvdec'\]"
    with pytest.raises(ClipflowError, match=rf"data\.decoder: 'opencv' is not one of {decoders}"):
        load_recipe("slowfast_tiny_synthetic", {"data": {"decoder": "opencv"}})


def test_recipe_file_that_is_not_yaml(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ClipflowError, match="is not valid YAML"):
        load_recipe(str(bad))


def test_cli_error_is_one_line_with_exit_2(tmp_path):
    done = clipflow("splits", "--list", str(tmp_path / "none.lst"), "--num-workers", "2", "--out-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"clipflow: error: list file {tmp_path / 'none.lst'} does not exist; "
        "check the data settings (train_list / val_list)"
    ]


def test_port_in_use_is_refused(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = clipflow("cluster", "plan", "--root-port", str(port), "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 2
    assert f"port {port} on localhost is in use" in done.stderr


def test_local_launcher_refuses_remote_hosts(tmp_path):
    done = clipflow("cluster", "plan", "--hosts", "node1,node2", "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 2 and "the local launcher runs every role on this machine" in done.stderr


def test_snakemake_lint_is_clean(repo):
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=repo,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert "Lints for" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_embedded_config_restates_no_default_the_schema_does_not_own(repo):
    """config.yaml names the embedded default's choices; each of them is its schema's default, so the schema
    stays the one place a default lives (and a changed default cannot leave config.yaml saying another)."""
    import yaml

    from clipflow.schemas import validate

    embedded = yaml.safe_load((repo / "config.yaml").read_text())
    assert validate(embedded, "config.schema.yaml", "config.yaml") == validate({}, "config.schema.yaml", "defaults")
    for section in ("cluster", "train"):
        assert "root_port" not in embedded[section] and "heartbeat_timeout" not in embedded[section]


def test_the_command_line_lists_its_command_groups_and_each_handler_lives_in_its_groups_module():
    """`python -m clipflow --help` lists the commands it always had; the cli package registers each group from a
    module of its own, whose handlers are the ones the parser calls."""
    import argparse

    from clipflow import cli

    done = clipflow("--help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == ["cluster", "launch", "data", "splits", "train", "collect", "ps", "evaluate", "predict", "status",
                      "report", "models"]  # fmt: skip
    handlers = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())
        if parser.get_default("func"):
            handlers[path] = parser.get_default("func").__module__

    walk(cli.build_parser(), "")
    assert handlers["train launch"] == "clipflow.cli.train" and handlers["evaluate worker"] == "clipflow.cli.evaluate"
    groups = {"launch": "cluster", "splits": "data"}
    for path, module in handlers.items():
        head = path.split()[0]
        assert module == f"clipflow.cli.{groups.get(head, head)}", path
