"""Through real Snakemake: after a finished run (1 epoch on 2 workers), each kind of changed setting reruns
exactly the stages it affects, and the dry run's reasons say why (docs/getting-started.md's table "What a changed
setting reruns").

One finished run is shared: every test works in a copy of its folder (results, logs and Snakemake's records),
changes the config there and asks Snakemake, with its default rerun triggers, what it would do. The new user's
case of issue 19 (2 epochs on 3 workers) and a host change are also really run.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import copy_workflow, free_port
from workflow_helpers import TINY, snakemake

pytestmark = pytest.mark.workflow

# what follows a new model: the stages that read it, and the target
AFTER_TRAIN = {"train", "collect", "evaluate", "report", "train_slowfast"}


def reasons(dry_run_output: str) -> dict[str, str]:
    """Rule -> its 'reason:' line, for every job a dry run plans."""
    found = {}
    rule = None
    for line in dry_run_output.splitlines():
        named = re.match(r"^(?:local)?rule (\w+):$", line)
        if named:
            rule = named.group(1)
        elif rule and line.strip().startswith("reason: "):
            found[rule] = line.strip().removeprefix("reason: ")
            rule = None
    return found


def ran_rules(run_output: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^(?:local)?rule (\w+):$", run_output, re.MULTILINE)}


def setting(workdir: Path, name: str) -> str:
    """The `name=value` line the finished run recorded for ``name`` (results/tiny/settings/train.txt)."""
    lines = (workdir / "results/tiny/settings/train.txt").read_text().splitlines()
    [line] = [x for x in lines if x.startswith(f"{name}=")]
    return line


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of the tiny set: 1 epoch on 2 workers."""
    work = copy_workflow(tmp_path_factory.mktemp("finished"))
    config = copy.deepcopy(TINY)
    config["overrides"]["train"]["epochs"] = 1
    config.update(run="tiny", cluster={"root_port": free_port(), "heartbeat_timeout": 10, "num_workers": 2})
    (work / "tiny.yaml").write_text(json.dumps(config))
    done = snakemake(work, "train_slowfast")
    assert done.returncode == 0, done.stdout + done.stderr
    nothing = snakemake(work, "-n", "train_slowfast")
    assert "Nothing to be done" in nothing.stdout + nothing.stderr, nothing.stdout + nothing.stderr
    return work


def changed(finished: Path, tmp_path: Path, change) -> Path:
    """A copy of the finished run's folder whose tiny.yaml has ``change`` applied."""
    work = tmp_path / "work"
    shutil.copytree(finished, work, symlinks=True)
    config = json.loads((work / "tiny.yaml").read_text())
    change(config)
    (work / "tiny.yaml").write_text(json.dumps(config))
    return work


def planned(work: Path) -> dict[str, str]:
    done = snakemake(work, "-n", "train_slowfast")
    assert done.returncode == 0, done.stdout + done.stderr
    return reasons(done.stdout)


def params_change(reason: str) -> tuple[set[str], set[str]]:
    """The values a 'Params have changed' reason lists before and now (Snakemake prints each as its repr, in no
    fixed order)."""
    m = re.match(r"Params have changed since last execution: .*? before: (.*) now: (.*?)\s*(;|$)", reason)
    assert m, reason
    return set(re.findall(r"'([^']*)'", m.group(1))), set(re.findall(r"'([^']*)'", m.group(2)))


def epochs(n):
    return lambda config: config["overrides"]["train"].update(epochs=n)


def workers(n):
    return lambda config: config["cluster"].update(num_workers=n)


def both(*changes):
    def apply(config):
        for change in changes:
            change(config)

    return apply


def test_more_epochs_rerun_train_and_what_follows_naming_the_setting(finished, tmp_path):
    jobs = planned(changed(finished, tmp_path, epochs(2)))
    assert set(jobs) == {"train_settings", *AFTER_TRAIN}
    assert params_change(jobs["train_settings"]) == ({"recipe train.epochs=1"}, {"recipe train.epochs=2"})
    assert "Input files updated by another job: results/tiny/settings/train.txt" in jobs["train"]


def test_another_worker_count_replans_resplits_and_retrains(finished, tmp_path):
    jobs = planned(changed(finished, tmp_path, workers(3)))
    assert set(jobs) == {"cluster_plan", "splits", "train_settings", *AFTER_TRAIN}
    assert params_change(jobs["train_settings"]) == ({"cluster.num_workers=2"}, {"cluster.num_workers=3"})
    assert jobs["cluster_plan"].startswith("Params have changed since last execution")
    assert jobs["splits"] == "Missing output files: results/tiny/splits/worker2.lst"
    assert "results/tiny/splits/worker2.lst" in jobs["train"] and "results/tiny/settings/train.txt" in jobs["train"]


def test_fewer_workers_resplit_because_the_splits_params_changed(finished, tmp_path):
    """2 -> 1: no split file is missing; the splits' own params say the count changed."""
    jobs = planned(changed(finished, tmp_path, workers(1)))
    assert set(jobs) == {"cluster_plan", "splits", "train_settings", *AFTER_TRAIN}
    assert jobs["splits"].startswith("Params have changed since last execution")
    assert params_change(jobs["train_settings"]) == ({"cluster.num_workers=2"}, {"cluster.num_workers=1"})


def test_epochs_and_workers_together_name_both_settings(finished, tmp_path):
    """The new user's case of issue 19, planned: it used to plan only cluster_plan."""
    jobs = planned(changed(finished, tmp_path, both(epochs(2), workers(3))))
    assert set(jobs) == {"cluster_plan", "splits", "train_settings", *AFTER_TRAIN}
    assert params_change(jobs["train_settings"]) == (
        {"cluster.num_workers=2", "recipe train.epochs=1"},
        {"cluster.num_workers=3", "recipe train.epochs=2"},
    )


def test_a_recipe_value_reruns_train_naming_old_and_new_value(finished, tmp_path):
    before = setting(finished, "recipe train.base_lr")
    lr = float(before.split("=")[1]) * 2
    jobs = planned(changed(finished, tmp_path, lambda config: config["overrides"]["train"].update(base_lr=lr)))
    assert set(jobs) == {"train_settings", *AFTER_TRAIN}
    assert params_change(jobs["train_settings"]) == ({before}, {f"recipe train.base_lr={lr}"})


def test_a_recipe_data_setting_of_the_splits_resplits_and_retrains(finished, tmp_path):
    assert setting(finished, "recipe data.split_fill") == 'recipe data.split_fill="wrap"'
    jobs = planned(changed(finished, tmp_path, lambda config: config["overrides"]["data"].update(split_fill="drop")))
    assert set(jobs) == {"splits", "train_settings", *AFTER_TRAIN}
    assert params_change(jobs["splits"]) == ({"wrap"}, {"drop"})
    assert params_change(jobs["train_settings"]) == (
        {'recipe data.split_fill="wrap"'},
        {'recipe data.split_fill="drop"'},
    )


def test_a_host_change_alone_replans_and_keeps_the_model(finished, tmp_path):
    """Placement beside -> cycle: the plan is made again; training, evaluation and the report stay. Run for real,
    then nothing is left to do."""
    work = changed(finished, tmp_path, lambda config: config["cluster"].update(placement="cycle"))
    jobs = planned(work)
    assert set(jobs) == {"cluster_plan"} and params_change(jobs["cluster_plan"]) == ({"beside"}, {"cycle"})
    model = work / "results/tiny/train/model_final.pt"
    trained_at = model.stat().st_mtime_ns
    done = snakemake(work, "train_slowfast")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran_rules(done.stdout + done.stderr) == {"cluster_plan"}
    assert json.loads((work / "results/tiny/cluster/plan.json").read_text())["placement"] == "cycle"
    assert model.stat().st_mtime_ns == trained_at
    again = snakemake(work, "-n", "train_slowfast")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout


def test_a_host_change_with_more_epochs_still_retrains(finished, tmp_path):
    """Train reads the remade plan as ancient(); its settings file brings it along."""
    work = changed(finished, tmp_path, both(epochs(2), lambda config: config["cluster"].update(placement="cycle")))
    jobs = planned(work)
    assert set(jobs) == {"cluster_plan", "train_settings", *AFTER_TRAIN}
    assert params_change(jobs["train_settings"]) == ({"recipe train.epochs=1"}, {"recipe train.epochs=2"})


def test_a_failed_train_is_not_dropped_when_the_hosts_change(finished, tmp_path):
    """Snakemake removes a failed job's outputs: with the model gone, train must run after the remade plan."""
    work = changed(finished, tmp_path, lambda config: config["cluster"].update(placement="cycle"))
    for name in ("model_final.pt", "metrics.jsonl"):
        (work / "results/tiny/train" / name).unlink()
    jobs = planned(work)
    assert set(jobs) == {"cluster_plan", *AFTER_TRAIN}
    assert jobs["train"].startswith(
        "Missing output files: results/tiny/train/model_final.pt, results/tiny/train/metrics.jsonl"
    ) or jobs["train"].startswith(
        "Missing output files: results/tiny/train/metrics.jsonl, results/tiny/train/model_final.pt"
    ), jobs["train"]


def test_two_epochs_on_three_workers_really_rerun_and_the_results_say_so(finished, tmp_path):
    """The new user's case of issue 19, run: it used to exit 0 in seconds with results of 1 epoch on 2 workers.
    Both kinds of change at once (a training setting, the worker count) redo exactly what the dry run planned."""
    work = changed(finished, tmp_path, both(epochs(2), workers(3)))
    plan = set(planned(work))
    assert plan == {"cluster_plan", "splits", "train_settings", *AFTER_TRAIN}
    done = snakemake(work, "train_slowfast")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert ran_rules(out) == plan
    history = [json.loads(x) for x in (work / "results/tiny/train/metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2]
    assert [w["rank"] for w in history[-1]["workers"]] == [0, 1, 2]
    metrics = json.loads((work / "results/tiny/metrics.json").read_text())
    assert metrics["workers"] == 3
    job = json.loads((work / "results/tiny/checkpoints/job.json").read_text())
    assert (job["plan"]["num_workers"], job["recipe"]["train"]["epochs"]) == (3, 2)
    collected = json.loads((work / "results/tiny/collected/manifest.json").read_text())
    assert sorted(f["rank"] for f in collected["files"] if f["kind"] == "log" and f["role"] == "worker") == [0, 1, 2]
    assert sorted(p.name for p in (work / "results/tiny/splits").glob("worker*.lst")) == [
        "worker0.lst", "worker1.lst", "worker2.lst",
    ]  # fmt: skip
    report = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (work / "results/tiny/report/report.html").read_text()))
    assert "Training epochs 2 " in report and "evaluated by 3 worker(s)" in report
    log = (work / "logs/tiny/train.log").read_text()  # it went on from epoch 1's checkpoint, resized to 3 workers
    assert "resumed from checkpoint" in log and "epoch_0001.pt" in log and "starting from scratch" not in log, log
    assert re.search(r"resize: 2 workers x \d+ clips x 1 -> 3 workers x \d+ clips x 1 \(scale", log), log
    assert "train.epochs: 1 -> 2" in log, log
    again = snakemake(work, "-n", "train_slowfast")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout


def test_a_recipe_value_really_reruns_what_its_dry_run_plans(finished, tmp_path):
    """Run for real, a recipe value's change redoes exactly the stages its dry run planned; training goes on from
    the finished run's checkpoint (the change printed), and afterwards nothing is left to do. (A training setting
    and the worker count changed together: test_two_epochs_on_three_workers_really_rerun_and_the_results_say_so.)"""
    work = changed(finished, tmp_path, lambda config: config["overrides"]["train"].update(base_lr=0.05))
    said = "train.base_lr: 0.025 -> 0.05"
    plan = set(planned(work))
    assert plan == {"train_settings", *AFTER_TRAIN}, plan
    done = snakemake(work, "train_slowfast")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran_rules(done.stdout + done.stderr) == plan
    log = (work / "logs/tiny/train.log").read_text()
    assert "resumed from checkpoint" in log and said in log and "starting from scratch" not in log, log
    again = snakemake(work, "-n", "train_slowfast")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout
