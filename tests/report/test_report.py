"""The report stage: the comparison with the recipe's references, the scaling points, the page with its
tables and figures, its broken inputs, and the page as headless Chromium shows it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from disk_helpers import files_on, fill, full_message
from helpers import assert_refused, clipflow
from report_helpers import CHROMIUM, TAB_BLUE, colour_columns, embedded_figures, ink, screenshot

from clipflow.errors import ClipflowError
from clipflow.report.compare import comparisons
from clipflow.report.page import ReportInputs, _multigrid, _throughput, write_report
from clipflow.report.scaling import scaling_points
from clipflow.train.loader_sizing import LoaderChoice, choose

NAMES = ["left", "right", "up", "down"]


def epoch_record(epoch: int, workers: int, clips_per_s: float, val: bool = True, batch: int = 4) -> dict:
    record = {"epoch": epoch, "step": 10 * epoch, "loss": 2.0 / epoch, "train_top1": 0.2 * epoch, "lr": 0.1 / epoch,
              "batch_size": batch,
              "clips_per_s": clips_per_s, "data_time": 1.0, "step_time": 3.0, "epoch_time": 4.0,
              "workers": [{"rank": r, "clips_per_s": clips_per_s / workers, "data_time": 0.5 + r, "step_time": 3.0}
                          for r in range(workers)]}  # fmt: skip
    if val:
        record.update(val_loss=1.5 / epoch, val_top1=0.15 * epoch, val_top5=0.9, val_videos=16)
    return record


def metrics_for(recipe: str = "slowfast_tiny_synthetic", reference: dict | None = None) -> dict:
    confusion = [[3, 1, 0, 0], [0, 4, 0, 0], [0, 0, 2, 2], [0, 0, 0, 0]]
    return {
        "recipe": recipe, "split": "index/val.lst", "num_videos": 12, "num_views": 6, "workers": 2,
        "protocol": "2 clips x 3 crops, short side 32", "top1": 0.75, "top5": 1.0, "loss": 0.61,
        "clip": {"top1": 0.7, "top5": 0.98}, "video": {"top1": 0.75, "top5": 1.0},
        "classes": NAMES,
        "per_class": [{"label": 0, "name": "left", "videos": 4, "top1": 0.75},
                      {"label": 1, "name": "right", "videos": 4, "top1": 1.0},
                      {"label": 2, "name": "up", "videos": 4, "top1": 0.5},
                      {"label": 3, "name": "down", "videos": 0, "top1": None}],
        "confusion": confusion,
        "reference": reference if reference is not None else {
            "top1": 72.5, "top5": None, "source": "a paper, table 3", "protocol": "10 clips x 3 crops",
            "others": [{"top1": 76.0, "top5": 93.5, "source": "a model zoo", "protocol": "30 views"}]},
    }  # fmt: skip


def write_run(results: Path, name: str, workers: int, speeds: list[float], recipe: str = "slowfast_tiny_synthetic",
              batch: int = 4):  # fmt: skip
    run = results / name
    (run / "train").mkdir(parents=True)
    (run / "cluster").mkdir()
    (run / "metrics.json").write_text(json.dumps(metrics_for(recipe)))
    history = [epoch_record(e, workers, s, batch=batch) for e, s in enumerate(speeds, 1)]
    (run / "train/metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    plan = {"launcher": "local", "num_workers": workers, "num_servers": 1, "security": "none",
            "roles": [{"role": "scheduler", "rank": 0, "host": "localhost"}]
            + [{"role": "worker", "rank": r, "host": "localhost"} for r in range(workers)]}  # fmt: skip
    (run / "cluster/plan.json").write_text(json.dumps(plan))
    manifest = {"splits": {"train": {"videos": 24, "failed": 1, "per_class": {"0": 6}, "frames_min": 24,
                                     "frames_max": 40, "sizes": ["84x64"], "shorter_than_clip": 3},
                           "val": {"videos": 12, "failed": 0, "per_class": {"0": 3}}},
                "failures": [{"path": "videos/train/broken.mp4", "error": "no video stream"}], "clip_span": 32,
                "short_videos": "keep"}  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def inputs_of(run: Path, results: Path | None = None, checks: Path | None = None) -> ReportInputs:
    return ReportInputs(run / "metrics.json", run / "train/metrics.jsonl", run / "manifest.json",
                        run / "cluster/plan.json", checks, results)  # fmt: skip


def test_comparison_rows_are_in_percent_with_the_difference_in_points():
    rows = comparisons(metrics_for())
    # the first reference has no top-5, so no top-5 row; the second has both
    assert [(r.metric, r.reference, r.source) for r in rows] == [
        ("top-1", 72.5, "a paper, table 3"),
        ("top-1", 76.0, "a model zoo"),
        ("top-5", 93.5, "a model zoo"),
    ]
    assert rows[0].this_run == pytest.approx(75.0) and rows[0].difference == pytest.approx(2.5)
    assert rows[1].difference == pytest.approx(-1.0) and rows[2].difference == pytest.approx(6.5)
    assert rows[0].protocol == "10 clips x 3 crops"
    empty = comparisons(metrics_for(reference={}))
    assert empty == []
    unpublished = comparisons(metrics_for(reference={"top1": None, "source": "none: synthetic", "protocol": "x"}))
    assert [(r.metric, r.reference, r.difference) for r in unpublished] == [("top-1", None, None)]


def test_scaling_takes_the_median_after_the_first_epoch_the_newest_run_per_count_of_this_recipe_and_batch(tmp_path):
    write_run(tmp_path, "a1", 1, [5.0, 10.0, 12.0, 11.0])  # median of 10, 12, 11: 11
    write_run(tmp_path, "a2", 2, [9.0, 20.0, 19.0])  # median of 20, 19: 19.5
    write_run(tmp_path, "b2", 2, [9.0, 18.0])  # one more 2-worker run of the same recipe
    write_run(tmp_path, "other", 4, [40.0, 40.0], recipe="resnet18_cifar10")
    write_run(tmp_path, "big", 4, [40.0, 40.0], batch=8)  # the same recipe at another batch per worker
    (tmp_path / "broken").mkdir()  # a run that never finished: no metrics.json
    os.utime(tmp_path / "a2/train/metrics.jsonl", (1, 1))  # a2 is older than b2: b2 counts
    points = scaling_points(tmp_path, "slowfast_tiny_synthetic", 4)
    assert [(p.run, p.workers, p.clips_per_s) for p in points] == [("a1", 1, 11.0), ("b2", 2, 18.0)]
    assert points[1].speedup(points[0]) == pytest.approx(18 / 11)
    assert points[1].efficiency(points[0]) == pytest.approx(9 / 11)


@pytest.fixture
def report(tmp_path) -> Path:
    """A report of a 2-worker run beside a 1-worker run of the same recipe, with host checks."""
    results = tmp_path / "results"
    write_run(results, "one", 1, [5.0, 10.0, 10.0])
    run = write_run(results, "two", 2, [9.0, 18.0, 19.0])
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({"ok": False, "hosts": [
        {"host": "root@10.0.0.11", "ok": True, "problems": [], "facts": {"python": "3.11.7", "torch": "2.14.1",
                                                                          "clipflow": "0.1.0", "free_gb": 61.6}},
        {"host": "root@10.0.0.12", "ok": False, "problems": ["port 9000 is taken"], "facts": {}}]}))  # fmt: skip
    collected = tmp_path / "collected.json"
    collected.write_text(json.dumps({"verified": True, "files": [
        {"host": "root@10.0.0.11", "kind": "log", "role": "worker", "rank": 0, "remote": "~/job/logs/worker-0.log",
         "local": "root@10.0.0.11/worker-0.log", "sha256": "ab" * 32, "bytes": 5120, "verified": True},
        {"host": "root@10.0.0.11", "kind": "model", "role": None, "rank": None, "remote": "/r/model_final.pt",
         "local": "root@10.0.0.11/model_final.pt", "sha256": "cd" * 32, "bytes": 901, "verified": True}]}))  # fmt: skip
    inputs = ReportInputs(**{**vars(inputs_of(run, results, checks)), "collected": collected})
    return write_report(inputs, tmp_path / "out", run="two")


def test_the_page_has_every_table_and_every_figure_non_empty(report):
    page = report.read_text()
    for heading in ("Evaluation", "Against the published results", "Per class", "Confusion matrix", "Training",
                    "Throughput", "Scaling", "Cluster", "Host checks", "Collected files", "Dataset",
                    "Left out (1)"):  # fmt: skip
        assert f">{heading}" in page, heading
    assert "video top-1 <b>75.00%</b>" in page and "+2.50 points" in page  # the summary line against the first
    assert "3 train videos are shorter than a clip's window of 32 frames (kept: their clips repeat frames" in page
    assert "<td>top-1</td><td>75.00</td><td>72.50</td><td>+2.50</td><td>a paper, table 3</td>" in page
    assert "<td>top-1</td><td>75.00</td><td>76.00</td><td>-1.00</td><td>a model zoo</td>" in page
    assert "<td>70.00 / 98.00</td>" in page  # clip level
    per_class = page.split(">Per class", 1)[1].split("</table>", 1)[0]
    assert per_class.index("<td>up</td>") < per_class.index("<td>left</td>") < per_class.index("<td>down</td>")
    assert "<tr><td>2</td><td>up</td><td>4</td><td>50.00</td></tr>" in per_class  # worst first; no videos: last
    assert "port 9000 is taken" in page and "FAILED" in page
    assert "<td>videos/train/broken.mp4</td><td>no video stream</td>" in page
    assert "<td>root@10.0.0.11</td><td>log</td><td>worker 0</td><td>root@10.0.0.11/worker-0.log</td><td>5120</td>" \
           f"<td>{'ab' * 8}</td><td>yes</td>" in page  # fmt: skip
    assert page.count('class="confusion"') == 1  # 4 classes: the table beside the figure
    # a history from before the loader was recorded: its worker rows with their share of waiting for data
    assert "<td>1</td><td>9.50</td><td>1.50</td><td>3.00</td><td>33.33</td><td>33.33</td><td>&mdash;</td>" in page
    figures = embedded_figures(page)
    assert sorted(figures) == ["confusion.png", "curves.png", "scaling.png", "throughput.png"]
    for name, image in figures.items():
        on_disk = report.parent / name
        assert on_disk.stat().st_size > 10_000, name
        assert image.width >= 600 and ink(image) > 0.02, name  # drawn, not blank
        if name != "confusion.png":  # drawn in the Blues colour map, not in line colours
            assert len(colour_columns(image, TAB_BLUE)) > 20, name  # the data itself is plotted
    assert figures["curves.png"].width == 1300 and figures["throughput.png"].width == 1300


def test_each_workers_wait_for_data_and_loader_are_in_the_throughput_table(tmp_path):
    history = [epoch_record(1, 2, 8.0), epoch_record(2, 2, 8.0)]
    history[0]["workers"][0]["data_time"] = 3.0  # a slow first epoch: the whole run waited more than the last epoch
    for record in history:
        record["workers"][0]["loader"] = choose(0.052, 0.18, 4, 1).record()
        record["workers"][1]["loader"] = LoaderChoice(2, 3).record()
    part = _throughput(history, tmp_path)
    auto = "decode 52 ms a batch of 4, step 180 ms: 1 loader process, prefetch 2, 1 decode thread (auto)"
    given = "2 loader processes, prefetch 3, 1 decode thread (train.loader_workers 2, as given)"
    # last epoch: 0.5 / (0.5 + 3); whole run: (3 + 0.5) / (3.5 + 6)
    assert f"<td>0</td><td>4.00</td><td>0.50</td><td>3.00</td><td>14.29</td><td>36.84</td><td>{auto}</td>" in part
    assert f"<td>1</td><td>4.00</td><td>1.50</td><td>3.00</td><td>33.33</td><td>33.33</td><td>{given}</td>" in part


def test_broken_inputs_are_named(tmp_path):
    run = write_run(tmp_path / "results", "r", 1, [1.0])
    out = tmp_path / "out"
    (run / "x.json").write_text("{not json")
    bad = {
        "metrics file .*missing.json does not exist": {"metrics": run / "missing.json"},
        "metrics file .*x.json line 1 is not JSON": {"metrics": run / "x.json"},
        "cluster plan .*x.json line 1 is not JSON": {"plan": run / "x.json"},
        "history .*nothing.jsonl does not exist; run the train stage first": {"history": run / "nothing.jsonl"},
    }  # fmt: skip
    for message, change in bad.items():
        inputs = inputs_of(run)
        with pytest.raises(ClipflowError, match=message):
            write_report(ReportInputs(**{**vars(inputs), **change}), out)
    (run / "train/metrics.jsonl").write_text('{"epoch": 1}\nnot a line\n')
    with pytest.raises(ClipflowError, match=r"metrics.jsonl line 2 is not JSON \(Expecting value\): 'not a line'"):
        write_report(inputs_of(run), out)
    (run / "train/metrics.jsonl").write_text('{"epoch": 1, "loss": 2.0, "lr": 0.1}\n')
    with pytest.raises(ClipflowError, match=r"metrics.jsonl line 1 has no clips_per_s, data_time, step_time"):
        write_report(inputs_of(run), out)
    (run / "train/metrics.jsonl").write_text("\n")
    with pytest.raises(ClipflowError, match="has no epoch in it"):
        write_report(inputs_of(run), out)
    (run / "metrics.json").write_text(json.dumps({"recipe": "r", "top5": 1.0, "num_videos": 3}))
    done = clipflow("report", "--metrics", str(run / "metrics.json"), "--history", str(run / "train/metrics.jsonl"),
                    "--manifest", str(run / "manifest.json"), "--plan", str(run / "cluster/plan.json"),
                    "--out-dir", str(out))  # fmt: skip
    assert done.returncode == 2
    assert "has no 'top1': is it the evaluate stage's output?" in done.stderr


def test_a_report_on_a_full_disk_is_one_line_and_leaves_no_figure(tmp_path, small_disk):
    """Issue 30: a full disk ended the report in a traceback with a 0-byte confusion.png left."""
    run = write_run(tmp_path / "results", "r", 2, [9.0, 18.0])
    inputs = ["--metrics", str(run / "metrics.json"), "--history", str(run / "train/metrics.jsonl"),
              "--manifest", str(run / "manifest.json"), "--plan", str(run / "cluster/plan.json")]  # fmt: skip
    whole = tmp_path / "whole"  # the same report on a disk with room: the figure's size
    assert clipflow("report", *inputs, "--out-dir", str(whole)).returncode == 0
    free = fill(small_disk, 0)
    line = assert_refused(clipflow("report", *inputs, "--out-dir", str(small_disk / "report")))
    needed = (whole / "confusion.png").stat().st_size  # the first figure written
    assert line == "clipflow: error: " + full_message(small_disk / "report/confusion.png", needed, free)
    assert files_on(small_disk) == []


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed (.ci/run installs it)")
def test_chromium_shows_the_figures_at_full_width(report, tmp_path):
    from PIL import Image

    shot = Image.open(screenshot(report, tmp_path / "shot.png")).convert("RGB")
    assert shot.width == 1400
    assert ink(shot) > 0.02  # text, tables and figures, not an empty page (measured: 0.04 of 1400 x 6000)
    blue = colour_columns(shot, TAB_BLUE)
    # the figures' own blue (lines, bars, the confusion cells) spreads over most of the width: drawn at their
    # 1,300 pixels, not shrunk to thumbnails
    assert blue and max(blue) - min(blue) > 1000


def test_the_links_name_the_straggler_and_set_the_prediction_beside_the_measured_step(tmp_path):
    """checks.json's links as the link check writes them (its own straggler rule and prediction), in the page: a
    row per pair, the slow one named, and the run's back end predicted against its measured step (a worker's
    batch of 4 over the median per-worker clips/s after the first epoch, 9.25: 0.432 s)."""
    from clipflow.cluster.links import LinkCheck, LinkFigures, stragglers
    from clipflow.cluster.prediction import predict_plan
    from clipflow.hosts.plan import Plan, Role

    run = write_run(tmp_path / "results", "two", 2, [9.0, 18.0, 19.0])
    pairs = [LinkFigures("h1", "h2", 0.02, 0.02, 0.021, 0.2), LinkFigures("h1", "h3", 5.0, 5.0, 5.2, 0.1),
             LinkFigures("h2", "h3", 4.0, 4.1, 4.0, 0.1)]  # fmt: skip
    links = LinkCheck(True, "", 0.25, pairs, stragglers(pairs))
    assert [(s["a"], s["b"]) for s in links.straggler] == [("h1", "h2")]
    plan = Plan("ssh", ["h1", "h2", "h3"], "10.0.0.11", 9091, 3, 3, 30.0,
                [Role("worker", r, h) for r, h in enumerate(["h1", "h2", "h3"])])  # fmt: skip
    links.prediction = predict_plan(plan, [vars(p) for p in pairs], 40_000_000, 0.3, "ps")
    links.allreduce = allreduce_figures(seconds=0.05)
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({"ok": True, "hosts": [], "links": links.to_dict()}))
    page = write_report(inputs_of(run, checks=checks), tmp_path / "out", run="two").read_text()
    section = page.split(">Links</h3>", 1)[1]
    assert "<td>h1 &lt;-&gt; h2</td><td>0.02</td>" in section
    assert "likely straggler: 0.02 Gbit/s, under half the median 4" in section
    assert "the likely straggler: h1 &lt;-&gt; h2." in section
    prediction = section.split(">Step time: predicted and measured</h3>", 1)[1].split("</table>", 1)[0]
    ps = links.prediction["backends"]["ps"]
    assert ps["bytes_per_host"] == 2 * 2 / 3 * 40_000_000 and ps["step_s"] > 0.3 + ps["bytes_per_host"] * 8 / 0.02e9
    row = (
        f"<td>ps (this run)</td><td>{ps['step_s']:.2f}</td><td>{ps['exchange_s']:.2f}</td><td>53.33</td>"
        f"<td>{ps['efficiency']:.2f}</td><td>0.43</td><td>0.69</td>"
    )  # measured: 4 / 9.25 s, 0.3 s over that
    assert row in prediction, prediction
    assert prediction.count("(this run)") == 1 and "<td>ddp</td>" in prediction and "<td>ps-host</td>" in prediction
    # the all-reduce: 4 MiB x 2(3-1)/3 x 8 bits over 0.05 s = 0.89 Gbit/s of bus bandwidth
    assert "<td>ps dist_sync_device</td><td>3</td><td>4.19</td><td>0.05</td><td>0.89</td>" in section, section
    assert "bus Gbit/s: the bytes x 1.33 / seconds (ring: 2(N-1)/N" in section


def allreduce_figures(**changed: object) -> dict:
    """The link check's all-reduce figures as measure_allreduce records them: ps, 3 workers, 4 MiB."""
    from clipflow.cluster.allreduce import FACTOR_OF, bus_factor

    figures = {"backend": "ps", "mode": "dist_sync_device", "workers": 3, "bytes": 4 * 1024 * 1024, "rounds": 2,
               "factor": bus_factor(3), "factor_of": FACTOR_OF, "seconds": None, "gbit_s": None, "ok": True,
               "note": ""}  # fmt: skip
    figures.update(changed)
    if figures["ok"]:
        figures["gbit_s"] = figures["bytes"] * figures["factor"] * 8 / figures["seconds"] / 1e9
    return figures


def test_a_failed_all_reduce_is_shown_with_its_note(tmp_path):
    from clipflow.cluster.links import LinkCheck, LinkFigures

    run = write_run(tmp_path / "results", "two", 2, [9.0, 18.0, 19.0])
    note = "all-reduce failed: scheduler 0 on h1 failed (exit code 2). Its last line: 'cannot listen on port 9091'"
    links = LinkCheck(True, "", 0.25, [LinkFigures("h1", "h2", 5.0, 5.0, 5.2, 0.1)],
                      allreduce=allreduce_figures(ok=False, note=note))  # fmt: skip
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({"ok": True, "hosts": [], "links": links.to_dict()}))
    page = write_report(inputs_of(run, checks=checks), tmp_path / "out", run="two").read_text()
    section = page.split(">Links</h3>", 1)[1]
    assert "All-reduce across all workers (ps dist_sync_device): all-reduce failed: scheduler 0 on h1 failed" in section
    assert "cannot listen on port 9091" in section and "bus Gbit/s" not in section


def test_a_multigrid_run_shows_its_cycle_a_row_per_long_cycle_stage(tmp_path):
    history = [epoch_record(e, 2, 8.0) for e in (1, 2, 3)]
    shapes = [(0, 4, 23, [2, 4], 4, 2, 2, 3), (0, 4, 23, [2, 4], 4, 2, 2, 3), (1, 8, 32, [2, 2], 2, 1, 1, 6)]
    for record, (stage, frames, crop, stride, clips, splits, factor, steps) in zip(history, shapes, strict=True):
        record["multigrid"] = {
            "stage": stage,
            "frames": frames,
            "crop": crop,
            "stride": stride,
            "clips": clips,
            "bn_splits": splits,
            "lr_factor": factor,
            "steps": steps,
            "short_cycle": True,
        }
        record["epoch_time"] = 10.0 * stage + 5.0
    part = _multigrid(history)
    assert (
        "<td>0</td><td>1-2</td><td>4 x 23²</td><td>2-4</td><td>4</td><td>2</td><td>2</td><td>6</td><td>10.00</td>"
        in part
    )
    assert (
        "<td>1</td><td>3</td><td>8 x 32²</td><td>2-2</td><td>2</td><td>1</td><td>1</td><td>6</td><td>15.00</td>" in part
    )
    assert "short cycle" in part
    assert _multigrid([epoch_record(1, 2, 8.0)]) == ""  # no multigrid: no section
