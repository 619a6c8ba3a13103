"""The embedded default through real Snakemake, twice (1 and 2 workers, the same recipe), then
`snakemake --report`: the run's page inside it with its tables and non-empty figures, a scaling
figure from the two runs, and the page as headless Chromium shows it."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from helpers import copy_workflow, free_port
from report_helpers import CHROMIUM, TAB_BLUE, colour_columns, embedded_figures, ink, screenshot
from workflow_helpers import TINY, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """The tiny default trained with 1 worker (run "one") and with 2 (run "two") on one data set."""
    work = copy_workflow(tmp_path_factory.mktemp("flow"))
    overrides = {**TINY["overrides"], "train": {**TINY["overrides"]["train"], "epochs": 2}}
    for run, workers in (("one", 1), ("two", 2)):
        cluster = {"root_port": free_port(), "heartbeat_timeout": 10, "num_workers": workers}
        (work / "tiny.yaml").write_text(json.dumps({**TINY, "overrides": overrides, "run": run, "cluster": cluster}))
        done = snakemake(work, "train_slowfast")
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return work


def test_snakemake_report_holds_the_page_with_every_table_and_figure(two_runs):
    done = snakemake(two_runs, "--report", "report.zip")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    with zipfile.ZipFile(two_runs / "report.zip") as archive:
        names = archive.namelist()
        # Snakemake's own page, and each report item under data/raw/<hash>/ by its file name
        items = {Path(n).name: archive.read(n) for n in names if n.startswith("report/data/raw/")}
        assert sorted(items) == ["confusion.png", "curves.png", "report.html", "throughput.png"], names
        page = items["report.html"].decode()
        front = archive.read("report/report.html").decode()
        assert "two" in front and "slowfast_tiny_synthetic" in front  # workflow.rst, rendered with the config
    for name in ("curves.png", "throughput.png", "confusion.png"):  # report items of their own, with captions
        assert len(items.get(name, b"")) > 10_000, (name, sorted(items))
    for heading in ("Evaluation", "Against the published results", "Per class", "Confusion matrix", "Training",
                    "Throughput", "Scaling", "Cluster", "Collected files", "Dataset"):  # fmt: skip
        assert f">{heading}" in page, heading
    metrics = json.loads((two_runs / "results/two/metrics.json").read_text())
    assert f"video top-1 <b>{100 * metrics['top1']:.2f}%</b>" in page
    assert "The recipe carries no reference result." not in page  # the tiny recipe has one, with top-1 null
    assert "<td>one</td><td>1</td>" in page and "<td>two</td><td>2</td>" in page  # both runs in the scaling table
    # the reproduction audit: the tiny recipe's reference.setup beside the run (2 workers x 4 clips, 2 epochs)
    assert ">Reproduction audit<" in page and ">Data set fingerprint<" in page
    assert "<td>global batch (workers x batch_size x accumulate)</td><td>2 x 4 x 1 = 8</td><td>16</td>" in page
    assert "<td>epochs</td><td>2</td><td>30</td><td>\u2717 differs</td>" in page
    assert "<td>schedule (lr_mode)</td><td>cosine</td><td>cosine</td><td>\u2713 same</td>" in page
    assert "<td>test views (clips x crops)</td><td>10 x 3</td><td>10 x 3</td><td>\u2713 same</td>" in page
    assert "<td>train videos</td><td>24</td><td>400</td><td>\u2717 differs</td>" in page  # TINY's 24 videos
    index = two_runs / "results/data/tiny/index"
    for split in ("train", "val"):
        assert hashlib.sha256((index / f"{split}.lst").read_bytes()).hexdigest() in page, split
    figures = embedded_figures(page)
    assert sorted(figures) == ["confusion.png", "curves.png", "scaling.png", "throughput.png"]
    for name, image in figures.items():
        assert image.width >= 600 and ink(image) > 0.02, name
        assert name == "confusion.png" or colour_columns(image, TAB_BLUE), name  # lines and bars in line colours
    history = [json.loads(x) for x in (two_runs / "results/two/train/metrics.jsonl").read_text().splitlines()]
    assert [w["rank"] for w in history[-1]["workers"]] == [0, 1]  # each worker's own speed, recorded
    assert all(w["clips_per_s"] > 0 and w["step_time"] > 0 for w in history[-1]["workers"])


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed (.ci/run installs it)")
def test_chromium_draws_the_run_page_with_its_figures(two_runs, tmp_path):
    from PIL import Image

    shot = Image.open(screenshot(two_runs / "results/two/report/report.html", tmp_path / "shot.png")).convert("RGB")
    assert ink(shot) > 0.02
    blue = colour_columns(shot, TAB_BLUE)
    assert blue and max(blue) - min(blue) > 1000  # the 1,300-pixel figures drawn at their size
    (tmp_path / "shot.png").rename(two_runs / "results/two/report/screenshot.png")  # kept for a look by hand
