"""clipflow.environment: every CLIPFLOW_* variable is read in one module into one typed object, checked, and listed
in docs/settings.md with its default."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from clipflow.environment import VARIABLES, ClipflowEnv
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
