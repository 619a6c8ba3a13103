"""The workflow's config as the user typed it (clipflow.config_entry): the config files and the --config words
read again, the numbers by YAML 1.2, from what Snakemake's own readers made of them (YAML 1.1, int()); the Slurm
time limit in minutes; the Slurm notice checked. The refusals in a real dry run are in tests/test_workflow_checks.py."""

from __future__ import annotations

import pytest
from snakemake.cli import parse_config
from snakemake.common.configfile import load_configfile
from snakemake.utils import update_config

from clipflow.config_entry import entered_config
from clipflow.errors import ClipflowError
from clipflow.hosts.slurm_resources import job_resources

BASE = "run: default\n"
SLURM = "cluster:\n  launcher: slurm\n  hosts: [n1, n2]\n  slurm:\n    time_limit: {}\n"


def entered(tmp_path, text: str, *config: str, more: tuple[str, ...] = ()) -> dict:
    """The config the Snakefile hands on: config.yaml (``text``) and the ``more`` --configfile texts as Snakemake
    reads and merges them, then its --config words (``config``), then clipflow's entry."""
    files = []
    for number, body in enumerate([text, *more]):
        files.append(tmp_path / f"config{number}.yaml")
        files[-1].write_text(body)
    snakemake_config: dict = {}
    for path in files:
        update_config(snakemake_config, load_configfile(str(path)))
    update_config(snakemake_config, parse_config(list(config)))
    return entered_config(snakemake_config, files, list(config))


@pytest.mark.parametrize(("typed", "snakemake_read"), [("12:00:00", 43200), ('"12:00:00"', "12:00:00")])
def test_a_time_limit_in_hours_minutes_seconds_is_720_minutes_from_the_config_file(tmp_path, typed, snakemake_read):
    (tmp_path / "seen.yaml").write_text(SLURM.format(typed))
    assert load_configfile(str(tmp_path / "seen.yaml"))["cluster"]["slurm"]["time_limit"] == snakemake_read
    config = entered(tmp_path, SLURM.format(typed))
    assert config["cluster"]["slurm"]["time_limit"] == 720
    assert job_resources(config["cluster"], notice=True)["runtime"] == 720  # the job's -t, in minutes


@pytest.mark.parametrize(
    "word", ["cluster={slurm: {time_limit: 12:00:00}}", "cluster={slurm: {time_limit: '12:00:00'}}"]
)
def test_a_time_limit_on_the_command_line_is_720_minutes_quoted_or_not(tmp_path, word):
    config = entered(tmp_path, SLURM.format(30), word)
    assert config["cluster"]["slurm"]["time_limit"] == 720


def test_a_later_file_and_the_command_line_win_as_snakemake_merges_them(tmp_path):
    later = "cluster:\n  slurm:\n    time_limit: 43200\n"  # a later --configfile's plain minutes
    assert entered(tmp_path, SLURM.format("12:00:00"), more=(later,))["cluster"]["slurm"]["time_limit"] == 43200
    earlier = entered(tmp_path, SLURM.format("12:00:00"), "cluster={slurm: {time_limit: 90}}")
    assert earlier["cluster"]["slurm"]["time_limit"] == 90


@pytest.mark.parametrize(
    ("text", "words", "message"),
    [
        ("cluster:\n  num_workers: 0x2000\n", (), "config: cluster.num_workers: '0x2000' is not of type 'integer'; "
         "give 1 or more workers"),
        ("cluster:\n  num_workers: 1_0\n", (), "config: cluster.num_workers: '1_0' is not of type 'integer'; give 1 "
         "or more workers"),
        (BASE, ("cluster={num_workers: 0x2000}",), "config: cluster.num_workers: '0x2000' is not of type 'integer'; "
         "give 1 or more workers"),
        (BASE, ("cluster={root_port: 1_0000}",), "config: cluster.root_port: '1_0000' is not of type 'integer'; give a "
         "free port in 1024-65535"),
        (SLURM.format("12h"), (), "config: cluster.slurm.time_limit '12h' is not a Slurm time limit of a minute or "
         "more; give minutes (720), minutes:seconds, hours:minutes:seconds (12:00:00), days-hours, days-hours:minutes "
         "or days-hours:minutes:seconds (1-12:00:00)"),
        (SLURM.format("0:10") + "    notice_s: 300\n", (), "config: cluster.slurm.notice_s 300 is not shorter than "
         "cluster.slurm.time_limit 1 min (60 s): the notice would come before the job starts; give notice_s below "
         "60, or 0 for no notice"),
    ],
)  # fmt: skip
def test_a_number_yaml_1_1_would_have_changed_is_refused_as_typed(tmp_path, text, words, message):
    with pytest.raises(ClipflowError) as err:
        entered(tmp_path, text, *words)
    assert str(err.value) == message


def test_a_top_level_value_stays_the_text_typed_and_a_nested_number_is_typed_by_its_schema(tmp_path):
    config = entered(tmp_path, BASE, "run=1_0", "overrides={train: {base_lr: 1e-3, epochs: 010}}")
    assert config["run"] == "1_0"  # Snakemake's int() made it 10
    assert config["overrides"] == {"train": {"base_lr": 0.001, "epochs": 10}}
