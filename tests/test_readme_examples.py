"""The README's example commands run as they are written there (issue 17): the `snakemake` and `clipflow`
commands of its bash blocks and its inline code. Snakemake gets `-n` (each would train); the clipflow commands
that only read run for real in a copy of the workflow; a command written with placeholders (`<run>`, `DIR`,
`...`) cannot run as it is, so its command must at least exist (`--help`)."""

from __future__ import annotations

import re
import subprocess

import pytest
from helpers import REPO, copy_workflow, python_env

from clipflow.cli import build_parser

README = (REPO / "README.md").read_text(encoding="utf-8")
COMMAND = re.compile(r"^(snakemake|python -m clipflow|clipflow)(?= |$)")
# The examples that need a finished training run, which the workflow tests make (test_workflow_report).
AFTER_A_RUN = {"snakemake --report report.zip", "snakemake --report"}
# The synthetic set the README's `data frames` example reads, kept small (config.yaml's own is 400 + 160 videos).
SMALL_SET = "data={synthetic: {num_train: 8, num_val: 8, min_frames: 40, max_frames: 48, short_side: 32}}"


def bash_blocks() -> list[str]:
    """The README's ```bash blocks that run a snakemake or clipflow command, each whole (a block may first
    write the files its command reads)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README, flags=re.S | re.M)
    return [block for block in blocks if any(COMMAND.match(line) for line in block.splitlines())]


def inline_commands() -> list[str]:
    """The README's inline code that is a command: `snakemake ...` or `python -m clipflow ...`."""
    spans = re.findall(r"`([^`]+)`", re.sub(r"^```.*?^```", "", README, flags=re.S | re.M))
    commands = {" ".join(span.split()) for span in spans}  # a span may go on over a line's end
    return sorted(c for c in commands if re.match(r"^(snakemake|python -m clipflow)(?= |$)", c))


def command_names() -> list[str]:
    """The README's inline `clipflow ...` code: the name of a command, sometimes with its arguments."""
    return sorted({span for span in re.findall(r"`(clipflow [^`\n]+)`", README)})


def has_placeholder(command: str) -> bool:
    return bool(re.search(r"<[^>]*>|\.\.\.|\[|\||\b[A-Z][A-Z_=]*\b", command.removeprefix("python -m ")))


def dry(line: str) -> str:
    """A README command line as run here: a snakemake one with -n (after the text as written)."""
    return f"{line} -n" if line.startswith("snakemake ") else line


def run(script: str, cwd, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=python_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def command_path(words: list[str]) -> list[str]:
    """The leading words of ``words`` that name a (sub)command of the clipflow parser."""
    parser, path = build_parser(), []
    for word in words:
        actions = [a for a in parser._actions if getattr(a, "choices", None) and isinstance(a.choices, dict)]
        if not actions or word not in actions[0].choices:
            break
        parser = actions[0].choices[word]
        path.append(word)
    return path


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    """A copy of the workflow with a small scanned synthetic set at config.yaml's data.dir, made by the workflow
    itself (the README's `data frames` example reads it)."""
    work = copy_workflow(tmp_path_factory.mktemp("readme"))
    target = "results/data/synthetic/index/train.lst"
    done = run(f"python -m snakemake --cores 2 {target} --config '{SMALL_SET}'", work, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return work


def test_the_readme_has_the_examples_this_test_runs():
    # so that a change to the README's form cannot leave this test running nothing
    assert len(bash_blocks()) >= 2
    assert any("'overrides={train: {epochs: 1}}'" in block for block in bash_blocks())
    assert any("--config 'cluster={hosts_file: hosts}'" in block for block in bash_blocks())
    runnable = [c for c in inline_commands() if not has_placeholder(c) and c not in AFTER_A_RUN]
    assert "snakemake --cores 1 train_slowfast" in runnable
    assert any(c.startswith("python -m clipflow data frames") for c in runnable)
    assert "python -m clipflow status <run>" in inline_commands() and has_placeholder("python -m clipflow status <run>")
    assert len(command_names()) >= 5


@pytest.mark.parametrize("block", bash_blocks(), ids=lambda block: next(filter(COMMAND.match, block.splitlines())))
def test_a_bash_block_runs_as_written(workflow, block):
    script = "\n".join(dry(line) for line in block.splitlines())
    done = run(script, workflow)
    assert done.returncode == 0, f"{script}\n{done.stdout}{done.stderr}"
    assert "This was a dry-run" in done.stdout


@pytest.mark.parametrize("command", inline_commands())
def test_an_inline_command_runs_as_written(workflow, command, capsys):
    if command in AFTER_A_RUN:
        pytest.skip("needs a finished run (tests/test_workflow_report.py makes one and its report)")
    if has_placeholder(command):
        assert_help(command.removeprefix("python -m clipflow").split(), capsys)
        return
    done = run(dry(command), workflow)
    assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", command_names())
def test_a_named_clipflow_command_exists(name, capsys):
    assert_help(name.removeprefix("clipflow ").split(), capsys)


def assert_help(words: list[str], capsys) -> None:
    """The command ``words`` begin with exists: the clipflow parser shows its help."""
    path = command_path(words)
    assert path and path[0] == words[0], words
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*path, "--help"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: clipflow {' '.join(path)}")
