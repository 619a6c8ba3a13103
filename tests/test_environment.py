"""clipflow.environment: every CLIPFLOW_* variable is read in one module into one typed object, checked, and listed
in docs/settings.md with its default."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from helpers import assert_refused, python_env

from clipflow.environment import VARIABLES, ClipflowEnv, unknown_variables
from clipflow.errors import ClipflowError

REPO = Path(__file__).resolve().parents[1]


def test_every_variable_fills_one_field_and_the_defaults_are_the_fields():
    assert [v.field for v in VARIABLES] == [f.name for f in fields(ClipflowEnv)]
    assert len({v.name for v in VARIABLES}) == len(VARIABLES) and all(v.name.startswith("CLIPFLOW_") for v in VARIABLES)
    assert ClipflowEnv.from_env({}) == ClipflowEnv()
    for v in VARIABLES:  # the default docs/settings.md shows is the one the reader gives
        if v.default:
            parsed = ClipflowEnv.from_env({v.name: v.default})
            assert parsed == ClipflowEnv(), v.name


def settings_table() -> list[tuple[str, str, str]]:
    text = (REPO / "docs/settings.md").read_text()
    section = text.split("## Settings from the environment", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(CLIPFLOW_[A-Z0-9_]+)` \| ([^|]*) \| ([^|]*) \|", section, flags=re.M)
    return [(name, default.strip().strip("`"), who.strip()) for name, default, who in rows]


def test_the_settings_page_lists_every_variable_with_its_default_and_who_sets_it():
    assert settings_table() == [(v.name, v.default, v.set_by) for v in VARIABLES]


def test_no_module_but_clipflow_environment_reads_a_clipflow_variable():
    reads = re.compile(r"""(environ|env)(\.get\(|\.pop\(|\[)\s*["']CLIPFLOW_|_var\([^)]*["']CLIPFLOW_""")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in (REPO / "src/clipflow").rglob("*.py")
        if path.name != "environment.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "variable, value, message",
    [
        ("CLIPFLOW_HEARTBEAT_INTERVAL", "0", "CLIPFLOW_HEARTBEAT_INTERVAL must be seconds between heartbeats"),
        ("CLIPFLOW_PS_SHM", "yes", "CLIPFLOW_PS_SHM must be 1 (shared memory between nodes on one machine) or 0"),
        ("CLIPFLOW_PS_PIECE", "-1", "CLIPFLOW_PS_PIECE must be elements per piece of a split key, an integer >= 0"),
        ("CLIPFLOW_PS_DROP_PERCENT", "101", "CLIPFLOW_PS_DROP_PERCENT must be a number 0-100; got 101"),
        ("CLIPFLOW_PS_SECURITY", "tls", "CLIPFLOW_PS_SECURITY must be one of curve, none, auto; got 'tls'"),
        ("CLIPFLOW_DEVICE", "tpu", "CLIPFLOW_DEVICE must be one of auto, cpu, cuda; got 'tpu'"),
        ("CLIPFLOW_TORCH_THREADS", "0", "CLIPFLOW_TORCH_THREADS must be an integer >= 1 (torch threads of this"),
        ("CLIPFLOW_PROGRESS_S", "inf", "CLIPFLOW_PROGRESS_S must be seconds between progress lines, a number > 0"),
        ("CLIPFLOW_REMOTE_GRACE_S", "-2", "CLIPFLOW_REMOTE_GRACE_S='-2' must be a number of seconds >= 0"),
        ("CLIPFLOW_FAULT_KILL", "1-2", "CLIPFLOW_FAULT_KILL='1-2': expected rank:epoch[:iteration]"),
        ("CLIPFLOW_FAULT_STEP_S", "-1", "CLIPFLOW_FAULT_STEP_S must be seconds to sleep after each step, a number"),
    ],
)  # fmt: skip
def test_a_bad_value_is_named_with_what_it_must_be(variable, value, message):
    with pytest.raises(ClipflowError) as caught:
        ClipflowEnv.from_env({variable: value})
    assert message in str(caught.value)


def test_the_heartbeat_timeout_must_exceed_the_interval():
    with pytest.raises(ClipflowError, match=r"CLIPFLOW_HEARTBEAT_TIMEOUT \(2 s\) must be larger than"):
        ClipflowEnv.from_env({"CLIPFLOW_HEARTBEAT_INTERVAL": "3", "CLIPFLOW_HEARTBEAT_TIMEOUT": "2"})


def test_values_are_typed():
    env = ClipflowEnv.from_env({"CLIPFLOW_PS_KEYS": "/keys", "CLIPFLOW_TORCH_THREADS": "3", "CLIPFLOW_PS_SHM": "0",
                                "CLIPFLOW_FAULT_KILL": "1:2", "CLIPFLOW_NO_PROGRESS": "1"})  # fmt: skip
    assert (env.ps_keys, env.torch_threads, env.ps_shm, env.fault_kill, env.no_progress) == (
        Path("/keys"), 3, False, (1, 2, 0), True,
    )  # fmt: skip


def test_a_sample_log_that_is_no_usable_folder_is_refused_before_any_process_starts(tmp_path):
    file = tmp_path / "samples.tsv"
    file.write_text("")
    for value, message in (
        (file, f"CLIPFLOW_SAMPLE_LOG {file} is a file, not a folder: name a folder (it is made when missing)"),
        (file / "logs", f"CLIPFLOW_SAMPLE_LOG {file / 'logs'}: {file} is a file, so the folder {file / 'logs'} "
                        "cannot be made; name a path under a folder"),
    ):  # fmt: skip
        with pytest.raises(ClipflowError) as caught:
            ClipflowEnv.from_env({"CLIPFLOW_SAMPLE_LOG": str(value)})
        assert str(caught.value) == message
    assert ClipflowEnv.from_env({"CLIPFLOW_SAMPLE_LOG": str(tmp_path / "new" / "log")}).sample_log == (
        tmp_path / "new" / "log"
    )  # made by the workers when missing
    done = subprocess.run([sys.executable, "-m", "clipflow", "launch", "-n", "1", "--log-dir", str(tmp_path / "logs"),
                           "--", "true"], env={**python_env(), "CLIPFLOW_SAMPLE_LOG": str(file)},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_refused(done, f"CLIPFLOW_SAMPLE_LOG {file} is a file, not a folder")
    assert not (tmp_path / "logs").exists()


def test_a_misspelt_variable_is_named_with_the_closest_real_one():
    env = {"CLIPFLOW_DEVCE": "cpu", "CLIPFLOW_HEARTBEAT_TIMOUT": "9", "CLIPFLOW_XYZZY": "1", "CLIPFLOW_DEVICE": "cpu",
           "DEVICE": "x"}  # fmt: skip
    assert unknown_variables(env) == [
        "CLIPFLOW_DEVCE is not a clipflow setting, so it is ignored; did you mean CLIPFLOW_DEVICE?",
        "CLIPFLOW_HEARTBEAT_TIMOUT is not a clipflow setting, so it is ignored; did you mean "
        "CLIPFLOW_HEARTBEAT_TIMEOUT?",
        "CLIPFLOW_XYZZY is not a clipflow setting, so it is ignored; docs/settings.md lists the settings",
    ]
    assert unknown_variables({v.name: v.default for v in VARIABLES}) == []
    done = subprocess.run([sys.executable, "-m", "clipflow", "status", "none", "--results", "/nonexistent"],
                          env={**python_env(), "CLIPFLOW_NOPROGRESS": "1"}, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.stderr.splitlines()[0] == (
        "clipflow: warning: CLIPFLOW_NOPROGRESS is not a clipflow setting, so it is ignored; did you mean "
        "CLIPFLOW_NO_PROGRESS?"
    )
    assert done.stderr.count("CLIPFLOW_NOPROGRESS") == 1 and done.returncode == 2, done.stderr


def test_the_tests_the_workflow_and_the_benchmarks_set_no_variable_clipflow_does_not_read():
    """A CLIPFLOW_* name they set (a dict key, a keyword, an assignment, a shell prefix) is a real one: a test
    helper's own variables are named otherwise (PYTEST_CLIPFLOW_*), so every clipflow command stays quiet. This
    file's misspelt names are the warning's test."""
    sets = re.compile(r"""(?<![A-Z0-9_])(CLIPFLOW_[A-Z0-9_]+)(?:["']\s*[:\]]|=)""")
    known = {v.name for v in VARIABLES}
    found = {
        f"{path.relative_to(REPO)}: {name}"
        for folder in ("tests", "workflow", "bench")
        for path in (REPO / folder).rglob("*")
        if path != Path(__file__).resolve()
        and path.is_file()
        and (path.suffix in (".py", ".smk", ".yaml", ".sh", ".cfg") or path.name == "Snakefile")
        for name in sets.findall(path.read_text(errors="replace"))
        if name not in known
    }
    assert found == set()
