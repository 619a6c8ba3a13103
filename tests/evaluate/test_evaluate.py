"""`clipflow evaluate` with the recipe's test protocol on real processes: every view of every video scored,
the videos split over the workers of a plan and gathered with torch.distributed, the same numbers for any
number of workers; the metrics from hand-made tensors; bad input named."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from disk_helpers import PAGE, files_on, fill, full_message
from helpers import assert_refused, clipflow_here, free_port, python_env
from launch_helpers import scanned_val
from safety_helpers import code_running_checkpoint, listing

from clipflow.checksums import record_checksum, sha256_of
from clipflow.data.cifar.batches import CIFAR10_CLASSES
from clipflow.errors import ClipflowError
from clipflow.evaluate.evaluate import load_model
from clipflow.evaluate.metrics import video_metrics
from clipflow.models.builder import build_model
from clipflow.recipe import load_recipe

SMALL_VIDEO = {"data": {"new_length": 8, "new_width": 42, "new_height": 32, "input_size": 32, "test_clips": 2,
                        "test_crops": 3}}  # fmt: skip


def save_untrained(path, recipe_name: str, overrides: dict, seed: int = 0):
    """A freshly built model in the train stage's format ({"model": state_dict, "recipe": recipe})."""
    recipe = load_recipe(recipe_name, overrides)
    torch.manual_seed(seed)
    torch.save({"model": build_model(recipe["model"]).state_dict(), "recipe": recipe}, path)
    return path


def make_plan(tmp_path, workers: int, name: str = "plan.json"):
    plan = tmp_path / name
    made = subprocess.run(
        [sys.executable, "-m", "clipflow", "cluster", "plan", "--num-workers", str(workers), "--root-port",
         str(free_port()), "--out", str(plan)],
        env=python_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return plan


def clipflow_evaluate(*args: str, here=None) -> subprocess.CompletedProcess:
    """`clipflow evaluate ARGS` as a process of its own, or with ``here`` (pytest's capsys) in this one: for a
    refusal, made before anything starts."""
    if here is not None:
        return clipflow_here(here, "evaluate", *args)
    return subprocess.run([sys.executable, "-m", "clipflow", "evaluate", *args], env=python_env(),
                          capture_output=True, text=True, timeout=240)  # fmt: skip


def launch(tmp_path, plan, model, val, root, out_name: str, *extra: str, here=None) -> subprocess.CompletedProcess:
    return clipflow_evaluate("launch", "--plan", str(plan), "--log-dir", str(tmp_path / f"logs_{out_name}"),
                             "--model", str(model), "--list", str(val), "--root", str(root),
                             "--out", str(tmp_path / out_name), "--grace", "5", *extra, here=here)  # fmt: skip


@pytest.fixture(scope="module")
def video_run(tmp_path_factory, tiny_videos):
    """An untrained tiny SlowFast (2 clips x 3 crops), the scanned val list with classes.txt beside it."""
    work = tmp_path_factory.mktemp("evaluate")
    scanned_val(work / "index", tiny_videos)
    (work / "index/classes.txt").write_text((tiny_videos / "classes.txt").read_text())
    return work, save_untrained(work / "model.pt", "slowfast_tiny_synthetic", SMALL_VIDEO), tiny_videos


def test_metrics_of_hand_made_tensors():
    """3 videos, 3 classes, 2 views each; the answers worked out by hand."""
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.1, 0.3, 0.6]], dtype=torch.float64)
    labels = torch.tensor([0, 1, 2])
    hits = torch.tensor([[2, 2], [1, 2], [0, 2]])
    loss = torch.tensor([0.5, 1.5, 1.0], dtype=torch.float64)
    m = video_metrics(probs, hits, loss, labels, views=2, names=["a", "b", "c"])
    assert m["video"] == {"top1": 2 / 3, "top5": 1.0} and m["top1"] == 2 / 3 and m["top5"] == 1.0
    assert m["clip"] == {"top1": 3 / 6, "top5": 6 / 6}
    assert m["loss"] == pytest.approx(1.0)
    assert m["confusion"] == [[1, 0, 0], [1, 0, 0], [0, 0, 1]]
    assert m["per_class"] == [
        {"label": 0, "name": "a", "videos": 1, "top1": 1.0},
        {"label": 1, "name": "b", "videos": 1, "top1": 0.0},
        {"label": 2, "name": "c", "videos": 1, "top1": 1.0},
    ]
    six = torch.tensor([[0.1, 0.2, 0.3, 0.05, 0.05, 0.15, 0.15], [0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1]])
    m = video_metrics(six.double(), torch.tensor([[0, 0], [1, 1]]), torch.zeros(2), torch.tensor([3, 0]), 1,
                      list("abcdefg"))  # fmt: skip
    # video 0: label 3 (0.05) is 6th of 7 (tied with 4, ranked behind 0.15 0.15 0.3 0.2 0.1): out of the top-5
    assert m["video"] == {"top1": 0.5, "top5": 0.5}
    assert m["per_class"][5] == {"label": 5, "name": "f", "videos": 0, "top1": None}
    assert sum(map(sum, m["confusion"])) == 2 and m["confusion"][3][2] == 1 and m["confusion"][0][0] == 1


def test_one_and_two_workers_give_the_same_test_protocol_numbers(tmp_path, video_run):
    work, model, root = video_run
    val = work / "index/val.lst"
    runs, timings = {}, {}
    for workers in (1, 2):
        began = time.monotonic()
        done = launch(tmp_path, make_plan(tmp_path, workers, f"plan{workers}.json"), model, val,
                      root, f"m{workers}.json")  # fmt: skip
        timings[workers] = time.monotonic() - began
        assert done.returncode == 0, done.stdout + done.stderr
        runs[workers] = json.loads((tmp_path / f"m{workers}.json").read_text())
    one, two = runs[1], runs[2]
    assert one["workers"] == 1 and two["workers"] == 2
    assert one["num_videos"] == 8 and one["num_views"] == 6
    assert one["protocol"] == "2 clips x 3 crops of 32x32, frames resized to 42x32"
    # Counts exactly, the loss within 1e-6: with other workers (or --batch-size) a view is in a batch of another
    # size, for which the CPU's kernels may round its logits differently in the last bits: that can change the
    # loss's last digits, and an argmax only where two classes' scores lie within that rounding
    for key in ("top1", "top5", "clip", "video", "per_class", "confusion", "classes", "num_views", "protocol"):
        assert one[key] == two[key], key
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    assert sum(map(sum, one["confusion"])) == 8 and sum(c["videos"] for c in one["per_class"]) == 8
    # the untrained model predicts more than one class, so videos gathered in the wrong rows would show here
    assert sum(1 for column in zip(*one["confusion"], strict=True) if any(column)) >= 2
    assert one["classes"] == (work / "index/classes.txt").read_text().split()
    assert set(one) == {"recipe", "split", "num_videos", "num_views", "workers", "protocol", "top1", "top5", "loss",
                        "clip", "video", "classes", "per_class", "confusion", "videos", "reference"}  # fmt: skip
    assert (tmp_path / "logs_m2.json/worker-1.log").exists()
    print(f"evaluate launch: 1 worker {timings[1]:.1f} s, 2 workers {timings[2]:.1f} s")


def test_one_process_form_and_a_ps_plan_give_the_same_numbers(tmp_path, video_run):
    """`clipflow evaluate` without a plan is one worker; a ps plan (scheduler, servers) starts only its workers; loader
    processes and the batch size change nothing."""
    work, model, root = video_run
    val = work / "index/val.lst"
    alone = clipflow_evaluate("--model", str(model), "--list", str(val), "--root", str(root),
                              "--out", str(tmp_path / "alone.json"), "--batch-size", "6")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert "test protocol (2 clips x 3 crops" in alone.stdout
    plan = make_plan(tmp_path, 2)
    assert {r["role"] for r in json.loads(plan.read_text())["roles"]} == {"scheduler", "server", "worker"}
    loading = {**SMALL_VIDEO, "train": {"loader_workers": 2}}  # the same weights, decoded by loader processes
    same = save_untrained(tmp_path / "same.pt", "slowfast_tiny_synthetic", loading)
    done = launch(tmp_path, plan, same, val, root, "ps.json", "--batch-size", "13")
    assert done.returncode == 0, done.stdout + done.stderr
    logs = tmp_path / "logs_ps.json"  # the roles' logs, the evaluation's job they started from, clipflow's record
    assert sorted(p.name for p in logs.iterdir()) == [".clipflow-made.json", "job.json", "worker-0.log", "worker-1.log"]
    job = json.loads((logs / "job.json").read_text())
    assert (job["model"], job["batch_size"], job["plan"]["num_workers"]) == (str(same), 13, 2)
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("alone.json", "ps.json"))
    assert a["workers"] == 1 and b["workers"] == 2
    for key in ("top1", "top5", "clip", "video", "per_class", "confusion"):
        assert a[key] == b[key], key
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)


def test_weights_scored_with_a_recipes_protocol_give_the_numbers_of_the_model_file(tmp_path, video_run, capsys):
    """`evaluate --weights FILE --recipe R` (what published weights are scored with): an imported file (state dict,
    model section, provenance; no recipe) gives the numbers of the model file it holds the weights of."""
    work, model, root = video_run
    val = work / "index/val.lst"
    held = torch.load(model, weights_only=True)
    imported = tmp_path / "imported.pt"
    torch.save({"model": held["model"], "model_settings": {"name": "slowfast", **{k: v for k, v in
                held["recipe"]["model"].items() if k != "name"}}, "provenance": {"source": "pyslowfast",
                "file": "x.pyth"}}, imported)  # fmt: skip
    runs = {}
    for name, flags in (("model", ("--model", str(model))),
                        ("weights", ("--weights", str(imported), "--recipe", "slowfast_tiny_synthetic",
                                     "--overrides", json.dumps(SMALL_VIDEO)))):  # fmt: skip
        done = clipflow_evaluate(*flags, "--list", str(val), "--root", str(root), "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        runs[name] = json.loads((tmp_path / name).read_text())
    for key in ("top1", "top5", "clip", "video", "per_class", "confusion", "protocol", "num_views"):
        assert runs["model"][key] == runs["weights"][key], key
    refused = [
        (("--weights", str(imported)), f"--weights {imported} needs --recipe: the recipe whose test protocol"),
        (("--weights", str(imported), "--model", str(model), "--recipe", "slowfast_tiny_synthetic"),
         "give --model (a model file of a run) or --weights (with --recipe), not both"),
        (("--model", str(model), "--recipe", "slowfast_tiny_synthetic"),
         "--recipe and --overrides go with --weights (a model file carries its own recipe)"),
        (("--weights", str(imported), "--recipe", "slowfast_tiny_synthetic", "--overrides", '{"model": {"width": 8}}'),
         f"--weights {imported} was made with model.width 16, the recipe has 8; set model.width: 16"),
    ]  # fmt: skip
    for flags, message in refused:
        done = clipflow_evaluate(*flags, "--list", str(val), "--root", str(root), "--out", str(tmp_path / "x.json"),
                                 here=capsys)  # fmt: skip
        assert done.returncode == 2 and message in done.stderr, (message, done.stderr)


def test_an_image_recipe_is_one_view_of_the_whole_image(tmp_path, cifar):
    model = save_untrained(tmp_path / "model.pt", "resnet18_cifar10", {})
    runs = {}
    for workers in (1, 2):
        done = launch(tmp_path, make_plan(tmp_path, workers, f"plan{workers}.json"), model,
                      cifar / "index/val.lst", cifar / "batches", f"m{workers}.json")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        runs[workers] = json.loads((tmp_path / f"m{workers}.json").read_text())
    one, two = runs[1], runs[2]
    assert one["protocol"] == "1 view (whole image)" and one["num_views"] == 1 and one["num_videos"] == 50
    assert one["classes"] == list(CIFAR10_CLASSES)
    assert one["clip"] == one["video"]  # one view: the clip is the video
    for key in ("top1", "top5", "clip", "video", "per_class", "confusion"):
        assert one[key] == two[key], key
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)


def test_a_model_that_would_run_code_or_is_truncated_is_refused_naming_it(tmp_path):
    evil = code_running_checkpoint(tmp_path / "evil.pt", tmp_path / "ran")
    with pytest.raises(ClipflowError) as err:
        load_model(evil)
    assert str(err.value) == (
        f"model file {evil}: its pickle asks for exec, which no file clipflow writes holds (loading it could run "
        "code): not loaded; use a file clipflow wrote, or, if you trust this one, load it yourself and save its "
        "tensors again with torch.save"
    )
    assert not (tmp_path / "ran").exists()
    model = save_untrained(tmp_path / "model.pt", "slowfast_tiny_synthetic", SMALL_VIDEO)
    assert load_model(model)[1]["name"] == "slowfast_tiny_synthetic"  # the train stage's format loads
    recorded = record_checksum(model)
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(ClipflowError) as err:
        load_model(model)
    assert str(err.value) == (
        f"model file {model} is damaged: its sha256 is {sha256_of(model)[:12]}..., not the {recorded[:12]}... its "
        "writer recorded in model.pt.sha256 (truncated or changed since); run the train stage again, or restore a "
        "good copy"
    )


def test_bad_input_is_named_before_any_worker_starts(tmp_path, video_run, capsys):
    work, model, root = video_run
    val = work / "index/val.lst"
    plan = make_plan(tmp_path, 2)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    lines = val.read_text().splitlines()
    (tmp_path / "malformed.lst").write_text("\n".join([lines[0], "just_a_path"]) + "\n")
    (tmp_path / "missing.lst").write_text("\n".join([lines[0], "videos/val/nope.mp4 30 1"]) + "\n")
    (tmp_path / "label.lst").write_text("\n".join([lines[0], lines[1].rsplit(" ", 1)[0] + " 8"]) + "\n")
    no_workers = json.loads(plan.read_text())
    no_workers["roles"] = [r for r in no_workers["roles"] if r["role"] != "worker"]
    no_workers["num_workers"] = 0
    (tmp_path / "empty_plan.json").write_text(json.dumps(no_workers))
    cases = [
        (plan, garbage, val, [], f"model file {garbage} cannot be loaded"),
        (plan, model, tmp_path / "malformed.lst", [], f"{tmp_path / 'malformed.lst'} line 2"),
        (plan, model, tmp_path / "missing.lst", [], f"video {root / 'videos/val/nope.mp4'} (listed in "
                                                    f"{tmp_path / 'missing.lst'} line 2) does not exist"),
        (plan, model, tmp_path / "label.lst", [], f"{tmp_path / 'label.lst'} line 2: label 8, but the model "
                                                  "(slowfast_tiny_synthetic) has 8 classes"),
        (plan, model, val, ["--batch-size", "0"], "evaluate launch: argument --batch-size: '0' is not a whole "
                                                  "number >= 1"),
        (tmp_path / "empty_plan.json", model, val, [], f"cluster plan {tmp_path / 'empty_plan.json'} has no workers"),
    ]  # fmt: skip
    for i, (plan_path, model_path, list_path, extra, message) in enumerate(cases):
        done = launch(tmp_path, plan_path, model_path, list_path, root, f"bad{i}.json", *extra, here=capsys)
        assert done.returncode == 2, (message, done.stdout + done.stderr)
        assert f"clipflow: error: {message}" in done.stderr, done.stderr
        assert not (tmp_path / f"logs_bad{i}.json").exists() and not (tmp_path / f"bad{i}.json").exists()


def test_an_out_or_log_dir_that_cannot_be_written_is_refused_before_any_scoring(tmp_path, video_run, capsys):
    """Issue 17: `--out` naming a folder failed with a traceback after the whole evaluation, a .tmp left behind."""
    work, model, root = video_run
    val = work / "index/val.lst"
    plan = make_plan(tmp_path, 2)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("mine\n")
    cases = {
        str(tmp_path / "folder"): f"--out {tmp_path / 'folder'} is a folder, but --out names the file to write: "
                                  f"give a file path (e.g. --out {tmp_path / 'folder' / 'metrics.json'})",
        f"{tmp_path / 'new'}/": f"--out {tmp_path / 'new'}/ is a folder",
        str(tmp_path / "file" / "metrics.json"): f"--out {tmp_path / 'file' / 'metrics.json'}: {tmp_path / 'file'} "
                                                 "is a file, so the folder",
    }  # fmt: skip
    before = listing(tmp_path)
    for out, message in cases.items():
        inputs = ["--model", str(model), "--list", str(val), "--root", str(root), "--out", out]
        alone = clipflow_evaluate(*inputs, here=capsys)
        launched = clipflow_evaluate("launch", "--plan", str(plan), "--log-dir", str(tmp_path / "logs"), *inputs,
                                     here=capsys)  # fmt: skip
        for done in (alone, launched):
            assert_refused(done, message)
            assert "test protocol" not in done.stdout  # nothing scored
        assert listing(tmp_path) == before, out  # no log folder, no job, no .tmp
    inputs = ["--model", str(model), "--list", str(val), "--root", str(root), "--out", str(tmp_path / "m.json")]
    bad_logs = clipflow_evaluate("launch", "--plan", str(plan), "--log-dir", str(tmp_path / "file"), *inputs,
                                 here=capsys)  # fmt: skip
    assert_refused(bad_logs, f"--log-dir {tmp_path / 'file'} is a file, not a folder")
    assert listing(tmp_path) == before


def test_metrics_on_a_full_disk_are_one_line_and_never_left_without_their_checksum(tmp_path, cifar, small_disk):
    """Issue 30: a full disk ended evaluate in a traceback, metrics.json left without its .sha256."""
    model = save_untrained(tmp_path / "model.pt", "resnet18_cifar10", {})
    free = fill(small_disk, 3 * PAGE)  # room for metrics.json (50 images: about 9 KB), none for its checksum
    out = small_disk / "metrics.json"
    line = assert_refused(clipflow_evaluate("--model", str(model), "--list", str(cifar / "index/val.lst"), "--root",
                                            str(cifar / "batches"), "--out", str(out)))  # fmt: skip
    checksum = f"{'0' * 64}  metrics.json\n"  # the sha256 line's length
    assert line == "clipflow: error: " + full_message(f"{out}.sha256", len(checksum), free)
    assert files_on(small_disk) == []
