"""The reproduction audit: a recipe as published gives no flag, a run that differs is flagged exactly where it
does, a value the reference lacks is "not published", the lists' fingerprint is hashlib's sha256, and the page
renders the audit from the recipe's reference."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe, recipe_path
from clipflow.report.audit import BY_HAND, DIFFERS, NOT_PUBLISHED, SAME, ListPrint, RunFacts, audit, list_print
from clipflow.report.page import ReportInputs, write_report

PUBLISHED = "slowfast_4x16_resnet50_kinetics400"  # PySlowFast's SLOWFAST_4x16_R50 setup, 64 clips a step


def write_list(path, videos: int):
    path.write_text("".join(f"videos/v{i}.mp4 40 {i % 4}\n" for i in range(videos)))
    return path


def fake_prints(train: int, val: int):
    """List fingerprints with these counts, without files (the rows read only the counts)."""
    return [ListPrint("train", Path("train.lst"), train, "0" * 64), ListPrint("val", Path("val.lst"), val, "1" * 64)]


def as_published(recipe: dict) -> dict:
    """``recipe`` changed to run its published setup's scale jitter (the shipped recipes crop as GluonCV does)."""
    recipe["data"]["scale_ratios"] = [224 / 256, 224 / 320]  # a 224 crop of a short side 256-320
    recipe["train"]["precise_bn_batches"] = 200
    return recipe


def published_counts(recipe: dict) -> tuple[int, int]:
    setup = recipe["reference"]["setup"]
    return setup["train_videos"], setup["val_videos"]


def verdicts(found) -> dict[str, str]:
    return {row.setting: row.verdict for row in found.rows}


def test_a_run_of_the_published_setup_has_no_flag():
    recipe = as_published(load_recipe(PUBLISHED))
    facts = RunFacts(workers=8)  # 8 workers x 8 clips = 64, base_lr 0.1 at 64
    found = audit(recipe, facts, {"top1": 0.75, "num_videos": 19761}, fake_prints(*published_counts(recipe)))
    assert set(verdicts(found).values()) == {SAME}, [r for r in found.rows if r.verdict != SAME]
    assert found.differing == [] and "SLOWFAST_4x16_R50" in found.source
    lr = next(r for r in found.rows if r.setting.startswith("learning rate"))
    assert (lr.this_run.split()[0], lr.published) == ("0.1", "0.1")


def test_a_run_that_differs_is_flagged_exactly_there():
    recipe = as_published(load_recipe(PUBLISHED, {"train": {"epochs": 100, "accumulate": 2}}))
    recipe["train"]["precise_bn_batches"] = 0
    found = audit(recipe, RunFacts(workers=8), None, fake_prints(published_counts(recipe)[0], 19000))
    flagged = {name for name, verdict in verdicts(found).items() if verdict == DIFFERS}
    # accumulate 2 doubles the global batch and so the scaled learning rate
    assert flagged == {"global batch (workers x batch_size x accumulate)", "learning rate (scaled to the global batch)",
                       "epochs", "precise BN batches", "val videos"}  # fmt: skip
    batch = found.rows[0]
    assert (batch.this_run, batch.published, batch.verdict) == ("8 x 8 x 2 = 128", "64", "\u2717 differs")
    assert "differs" in DIFFERS and found.differing[0].startswith("global batch")


def test_the_shipped_recipe_crops_unlike_pyslowfast_and_a_missing_value_is_not_published():
    recipe = load_recipe(PUBLISHED)  # GluonCV's crop: 340x256, ratios 1.0 and 0.8 of 256 resized to 224
    del recipe["reference"]["setup"]["precise_bn_batches"]
    found = audit(recipe, RunFacts(workers=32), None, fake_prints(*published_counts(recipe)))
    rows = {row.setting: row for row in found.rows}
    scale = rows["scale jitter (short side seen)"]
    assert scale.verdict == DIFFERS and scale.this_run.startswith("short side 224-280")
    assert scale.published.startswith("short side 256-320")
    precise = rows["precise BN batches"]
    assert (precise.this_run, precise.published, precise.verdict) == ("200", None, NOT_PUBLISHED)
    words = audit(load_recipe(PUBLISHED, {"reference": {"setup": {"scale": "256-320 jitter"}}}), RunFacts(32), None, [])
    assert {r.setting: r.verdict for r in words.rows}["scale jitter (short side seen)"] == BY_HAND


def test_a_recipe_without_a_setup_is_not_published_throughout():
    recipe = load_recipe("slowfast_tiny_synthetic")
    del recipe["reference"]["setup"]
    found = audit(recipe, RunFacts(workers=2, val_top1=0.5, val_videos=160), {"top1": 0.6, "num_videos": 160}, [])
    assert set(verdicts(found).values()) == {NOT_PUBLISHED} and found.source is None
    assert found.accuracy == [("single-clip validation (the training's last)", 160, 50.0),
                              ("10 clips x 3 crops test (evaluate)", 160, 60.0)]  # fmt: skip


def test_the_fingerprint_is_the_list_files_count_and_sha256(tmp_path):
    path = write_list(tmp_path / "train.lst", 7)
    printed = list_print("train", path)
    assert (printed.videos, printed.sha256) == (7, hashlib.sha256(path.read_bytes()).hexdigest())
    with pytest.raises(ClipflowError, match="val list .* is not there"):
        list_print("val", tmp_path / "val.lst")


def test_run_facts_take_the_plans_workers_and_the_last_validation():
    history = [
        {"epoch": 1, "val_top1": 0.25, "val_videos": 16},
        {"epoch": 2},
        {"epoch": 3, "val_top1": 0.5, "val_videos": 16},
        {"epoch": 4},
    ]
    assert RunFacts.of({"num_workers": 3}, history) == RunFacts(3, 0.5, 16)
    with pytest.raises(ClipflowError, match="num_workers"):
        RunFacts.of({}, history)


def test_the_page_holds_the_audit_from_the_recipes_reference(tmp_path):
    """The tiny default's audit on a page, as the report stage draws it (the workflow test does it for real)."""
    run = tmp_path / "run"
    run.mkdir()
    metrics = {"recipe": "slowfast_tiny_synthetic", "top1": 0.5, "top5": 1.0, "num_videos": 16,
               "reference": load_recipe("slowfast_tiny_synthetic")["reference"]}  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(metrics))
    record = {"epoch": 1, "step": 5, "loss": 1.0, "lr": 0.05, "batch_size": 8, "val_top1": 0.4, "val_videos": 16,
              "clips_per_s": 10.0, "data_time": 1.0, "step_time": 1.0, "epoch_time": 2.0,
              "workers": [{"rank": 0, "clips_per_s": 10.0, "data_time": 1.0, "step_time": 1.0}]}  # fmt: skip
    (run / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    (run / "manifest.json").write_text(json.dumps({"splits": {}}))
    (run / "plan.json").write_text(json.dumps({"num_workers": 2, "roles": []}))
    train, val = write_list(run / "train.lst", 12), write_list(run / "val.lst", 16)
    inputs = ReportInputs(run / "metrics.json", run / "metrics.jsonl", run / "manifest.json", run / "plan.json",
                          recipe=recipe_path("slowfast_tiny_synthetic"),
                          overrides={"train": {"epochs": 2}}, train_list=train, val_list=val)  # fmt: skip
    page = write_report(inputs, tmp_path / "report").read_text()
    assert ">Reproduction audit<" in page and "clipflow&#x27;s own design of this recipe" in page
    assert "<td>epochs</td><td>2</td><td>30</td><td>\u2717 differs</td>" in page  # the override, flagged
    assert "<td>global batch (workers x batch_size x accumulate)</td><td>2 x 8 x 1 = 16</td><td>16</td>" in page
    assert "<td>train videos</td><td>12</td><td>400</td><td>\u2717 differs</td>" in page
    assert hashlib.sha256(train.read_bytes()).hexdigest() in page and "<td>40.00</td>" in page  # val top-1 40%
