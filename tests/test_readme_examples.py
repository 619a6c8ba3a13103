"""The example commands of the README and of every page under docs/ run as they are written there (issue 17;
the pages since issue 28): the `snakemake` and `clipflow` commands of their bash blocks and their inline code.
Snakemake gets `-n` (each would train); the clipflow commands that only read run for real in a copy of the
workflow; a command written with placeholders (`<run>`, `DIR`, `...`) cannot run as it is, so its command must at
least exist (`--help`). The README stays a map (at most 250 lines), every docs page says first what its reader
will be able to do, and every relative link of the README and the pages leads to a file, and a heading there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from folder_helpers import MOTIONS, make_class_folders, write_motion_video
from helpers import REPO, copy_workflow, free_port, python_env

from clipflow.cli import build_parser

README = (REPO / "README.md").read_text(encoding="utf-8")
# The README and the guides it links to, each with its example commands (architecture.md included).
PAGES = {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
         for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}  # fmt: skip
COMMAND = re.compile(r"^(snakemake|python -m clipflow|clipflow)(?= |$)")
# The examples that need a finished training run: workflow/test_report runs them on its two runs, so they are no
# params here (a param that always skips would pass without running anything).
AFTER_A_RUN = {"snakemake --report report.zip", "snakemake --report"}
# The synthetic set the README's `data frames` example reads, kept small (config.yaml's own is 400 + 160 videos).
SMALL_SET = (
    "data={dir: results/data/synthetic, synthetic: {num_train: 8, num_val: 8, min_frames: 40, max_frames: 48, "
    "short_side: 32}}"
)


def bash_blocks(text: str = README) -> list[str]:
    """A page's ```bash blocks that run a snakemake or clipflow command, each whole (a block may first
    write the files its command reads)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    return [block for block in blocks if any(COMMAND.match(line) for line in block.splitlines())]


def inline_commands(text: str = README) -> list[str]:
    """A page's inline code that is a command: `snakemake ...` or `python -m clipflow ...`."""
    spans = re.findall(r"`([^`]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    commands = {" ".join(span.split()) for span in spans}  # a span may go on over a line's end
    return sorted(c for c in commands if re.match(r"^(snakemake|python -m clipflow)(?= |$)", c))


def command_names(text: str = README) -> list[str]:
    """A page's inline `clipflow ...` code: the name of a command, sometimes with its arguments."""
    return sorted({span for span in re.findall(r"`(clipflow [^`\n]+)`", text)})


def section(text: str, heading: str) -> str:
    """The part of a page under ``heading`` (a line of its own), up to the next heading of that level."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    return text[start : end if end >= 0 else len(text)]


OWN_VIDEOS = section(README, "## Your own videos")  # run for real below, from videos made here


def on_pages(examples) -> list:
    """``examples`` (one of the three above) of every page, as pytest params named by page; the README's own-videos
    blocks are :func:`test_your_own_videos_as_the_readme_says`'s."""
    return [
        pytest.param(page, example, id=f"{page}: {next(filter(COMMAND.match, example.splitlines()), example)}")
        for page, text in PAGES.items()
        for example in examples(text)
        if not (page == "README.md" and example in OWN_VIDEOS)
    ]


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
    # so that a change to the README's form cannot leave this test running nothing; an example that moved to a
    # docs page is looked for there
    assert len(bash_blocks()) >= 2
    assert any("'overrides={train: {epochs: 1}}'" in block for block in bash_blocks())
    assert any(
        "--config 'cluster={hosts_file: hosts}'" in block for block in bash_blocks(PAGES["docs/ssh-clusters.md"])
    )
    assert any("source: folder" in block for block in bash_blocks(OWN_VIDEOS))  # your own videos, in the README
    assert any(block.startswith("clipflow predict") for block in bash_blocks(OWN_VIDEOS))
    runnable = [c for c in inline_commands() if not has_placeholder(c) and c not in AFTER_A_RUN]
    assert "snakemake --cores 1 train_slowfast" in runnable
    in_data = [c for c in inline_commands(PAGES["docs/data.md"]) if not has_placeholder(c)]
    assert any(c.startswith("python -m clipflow data frames") for c in in_data)
    assert "python -m clipflow status <run>" in inline_commands() and has_placeholder("python -m clipflow status <run>")
    assert len({name for text in PAGES.values() for name in command_names(text)}) >= 5


def test_every_docs_page_has_examples_this_test_runs():
    # the guides with commands: each one's are collected (a change of form would leave them unchecked)
    for page in ["docs/getting-started.md", "docs/data.md", "docs/ssh-clusters.md", "docs/separate-machines.md",
                 "docs/settings.md", "docs/slurm.md", "docs/failures-and-resume.md", "docs/bad-input.md"]:  # fmt: skip
        text = PAGES[page]
        assert bash_blocks(text) or inline_commands(text) or command_names(text), page


def command_lines(block: str) -> list[str]:
    """A block's lines, a command continued with a backslash joined into one."""
    return [" ".join(line.split()) for line in block.replace("\\\n", " ").splitlines()]


@pytest.mark.parametrize("page, block", on_pages(bash_blocks))
def test_a_bash_block_runs_as_written(workflow, page, block, capsys):
    commands = [line for line in command_lines(block) if line.startswith("clipflow ")]
    if any(map(has_placeholder, commands)):  # a file this machine cannot have (a model zoo's): each command parses
        for line in commands:
            build_parser().parse_args(line.split()[1:])
        return
    script = "\n".join(dry(line) for line in block.splitlines())
    done = run(script, workflow)
    assert done.returncode == 0, f"{script}\n{done.stdout}{done.stderr}"
    assert "This was a dry-run" in done.stdout


def runnable_inline_commands(text: str) -> list[str]:
    return [c for c in inline_commands(text) if c not in AFTER_A_RUN]


@pytest.mark.parametrize("page, command", on_pages(runnable_inline_commands))
def test_an_inline_command_runs_as_written(workflow, page, command, capsys):
    if has_placeholder(command):
        assert_help(command.removeprefix("python -m clipflow").split(), capsys)
        return
    done = run(dry(command), workflow)
    assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("page, name", on_pages(command_names))
def test_a_named_clipflow_command_exists(page, name, capsys):
    assert_help(name.removeprefix("clipflow ").split(), capsys)


def assert_help(words: list[str], capsys) -> None:
    """The command ``words`` begin with exists: the clipflow parser shows its help. Words that are only a
    placeholder (`python -m clipflow ...`: any command) name the program itself, whose help must show."""
    path = command_path(words)
    if words != ["..."]:
        assert path and path[0] == words[0], words
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*path, "--help"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: clipflow {' '.join(path)}".rstrip())


def test_the_readme_is_a_map_of_at_most_250_lines():
    assert len(README.splitlines()) <= 250
    guides = {link.partition("#")[0] for link in relative_links(README) if link.startswith("docs/")}
    assert {page for page in PAGES if page.startswith("docs/")} <= guides  # a link to every page


@pytest.mark.parametrize(
    "page", [page for page in PAGES if page.startswith("docs/") and page != "docs/architecture.md"]
)
def test_a_docs_page_starts_with_what_its_reader_will_be_able_to_do(page):
    first_paragraph = PAGES[page].split("\n\n")[1]  # after the page's title
    assert first_paragraph.startswith("After reading this you will be able to"), page


def anchors(text: str) -> Iterator[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, a repeated
    one numbered."""
    seen: dict[str, int] = {}
    for title in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def relative_links(text: str) -> list[str]:
    """A page's markdown link targets that are not web addresses (link text may go over a line's end)."""
    targets = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    return [t for t in targets if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", list(PAGES))
def test_every_relative_link_leads_to_a_file_and_a_heading_there(page):
    broken = []
    for link in relative_links(PAGES[page]):
        path, _, anchor = link.partition("#")
        target = (REPO / page).parent / path if path else REPO / page
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(REPO)}")
        elif anchor and anchor not in set(anchors(target.read_text(encoding="utf-8"))):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(REPO)}")
    assert broken == [], page


@pytest.mark.workflow  # a module with a workflow run starts first (conftest's order)
def test_your_own_videos_as_the_readme_says(tmp_path_factory):
    """The README's path for a folder of one's own videos, run as written on class folders made here (with a port of
    its own and 2 of the recipe's 30 epochs: bench/own_videos.py times the whole recipe): at most 3 steps, no file
    written by hand but the config; it ends in a report naming the classes, and `clipflow predict` answers for a
    video."""
    steps = re.findall(r"^\d+\. \*\*", OWN_VIDEOS, flags=re.M)
    assert 1 <= len(steps) <= 3
    run_block, predict_block = bash_blocks(OWN_VIDEOS)
    asked = re.search(r"(videos/(\w+)/\S+)", predict_block)
    assert asked, predict_block
    work = copy_workflow(tmp_path_factory.mktemp("own_videos"))
    folders = [asked.group(2), "clapping", "jumping", "running"]
    made = make_class_folders(work / "videos", folders)
    write_motion_video(work / asked.group(1), MOTIONS[0], seed=99)  # the one the README asks about, of folders[0]
    done = run(on_a_free_port(run_block), work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    asked_done = run(predict_block, work)
    assert asked_done.returncode == 0, asked_done.stderr
    assert asked.group(1) in asked_done.stdout and any(name in asked_done.stdout for name in folders)

    # the classes are the folder names, sorted; the report names them and the chance of a guess
    index = next((work / "results/data").glob("folder-videos-*/index"))
    classes = sorted(folders)
    assert (index.parent / "classes.txt").read_text().splitlines() == classes
    manifest = json.loads((index / "manifest.json").read_text())
    assert (manifest["num_classes"], manifest["classes"]) == (4, classes)
    report = (work / "results/mine/report/report.html").read_text(encoding="utf-8")
    assert all(name in report for name in classes) and "4 classes, chance (a guess) is 25.0% top-1" in report
    # stratified: a fifth of each class validates (round(6 / 5) = 1 of the README's folder's 6, 1 of 5 elsewhere)
    counts = {s: manifest["splits"][s]["per_class"] for s in ("train", "val")}
    assert counts["val"] == {str(i): 1 for i in range(4)}
    assert counts["train"] == {str(i): 5 if classes[i] == folders[0] else 4 for i in range(4)}
    # the same seed the same split; another seed another one
    for seed, same in ((0, True), (1, False)):
        again = clipflow_run(["data", "lists", "--source", "folder", "--root", "videos", "--seed", str(seed),
                              "--out-dir", f"split{seed}"], work)  # fmt: skip
        assert again.returncode == 0, again.stderr
        val = (work / f"split{seed}/val_labels.txt").read_text()
        assert (val == (index.parent / "val_labels.txt").read_text()) is same
    assert sum(len(v) for v in made.values()) + 1 == 21  # every video is in a list: none was written by hand

    # clipflow predict gives every val video the class the evaluation scored for it
    metrics = json.loads((work / "results/mine/metrics.json").read_text())
    val_videos = [line.rsplit(" ", 2)[0] for line in (index / "val.lst").read_text().splitlines()]
    answered = clipflow_run(["predict", "--run", "mine", "--json", *(f"videos/{v}" for v in val_videos)], work)
    assert answered.returncode == 0, answered.stderr
    predicted = [json.loads(line)["top"][0] for line in answered.stdout.splitlines()]
    scored = {v["path"]: v for v in metrics["videos"]}
    for path, top in zip(val_videos, predicted, strict=True):
        assert top["label"] == scored[path]["predicted"] and top["name"] == classes[top["label"]]
        assert abs(top["probability"] - scored[path]["probability"]) < 1e-6


def on_a_free_port(block: str) -> str:
    """``block`` with its snakemake command on a root port of its own (the suite's other runs share this machine's
    ports; the README's user has the default, 9091, to themselves) and 2 epochs (the suite's time)."""
    extra = f" --config 'cluster={{root_port: {free_port()}}}' 'overrides={{train: {{epochs: 2}}}}'"
    return "\n".join(line + extra if line.startswith("snakemake ") else line for line in block.splitlines())


def clipflow_run(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clipflow", *args], cwd=cwd, env=python_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
