"""`clipflow predict`: a video's top classes under the recipe's test protocol, the same as the evaluation scores
for it (metrics.json's ``videos``); unreadable videos named with their reason while the others are answered; the
model given by a run name or a file, and bad ones refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import assert_refused, python_env
from kinetics_helpers import write_video

from clipflow.cli import build_parser
from clipflow.data.listfile import VideoEntry
from clipflow.data.scan import probe
from clipflow.errors import ClipflowError
from clipflow.evaluate.evaluate import evaluate, load_model
from clipflow.evaluate.predict import _score, class_names_of, model_path, predict
from clipflow.models.builder import build_model
from clipflow.recipe import load_recipe

SMALL_VIDEO = {"data": {"new_length": 8, "new_width": 42, "new_height": 32, "input_size": 32, "test_clips": 2,
                        "test_crops": 3}}  # fmt: skip
CLASSES = ["left slow", "left fast", "right slow", "right fast", "up slow", "up fast", "down slow", "down fast"]
VIDEOS = {"a.mp4": (20, 64, 48), "bb.mp4": (28, 48, 64), "ccc.mp4": (17, 80, 44)}  # frames, width, height


def clipflow(*args: str, cwd=None) -> subprocess.Popen:
    """`python -m clipflow ARGS`, started (answered by :func:`done`), so that several run side by side."""
    return subprocess.Popen([sys.executable, "-m", "clipflow", *args], cwd=cwd, env=python_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def done(started: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = started.communicate(timeout=120)
    return subprocess.CompletedProcess(started.args, started.returncode, out, err)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A workflow folder with an untrained tiny SlowFast (2 clips x 3 crops) as run ``tiny``'s final model (saved
    as training saves it, with class names), 3 small videos, their list (frame counts as the scan's probe gives
    them) and the evaluation's metrics.json of that list."""
    work = tmp_path_factory.mktemp("predict")
    lines = []
    for label, (name, (frames, width, height)) in enumerate(VIDEOS.items()):
        write_video(work / "videos" / name, frames, width, height)
        lines.append(f"{name} {probe(work / 'videos' / name)[0]} {label * 3}\n")
    (work / "val.lst").write_text("".join(lines))
    recipe = load_recipe("slowfast_tiny_synthetic", {**SMALL_VIDEO, "model": {"classes": CLASSES}})
    torch.manual_seed(3)
    model = work / "results/tiny/train/model_final.pt"
    model.parent.mkdir(parents=True)
    torch.save({"model": build_model(recipe["model"]).state_dict(), "recipe": recipe, "epoch": 1}, model)
    evaluate(model, work / "val.lst", work / "videos", work / "metrics.json")
    return work, model, json.loads((work / "metrics.json").read_text())


def test_metrics_json_records_each_videos_prediction(evaluated):
    work, _, metrics = evaluated
    videos = metrics["videos"]
    assert [v["path"] for v in videos] == list(VIDEOS) and [v["label"] for v in videos] == [0, 3, 6]
    for v in videos:
        assert 0 <= v["predicted"] < 8 and 1 / 8 <= v["probability"] <= 1  # the top of 8 means is at least 1/8
    confusion = torch.zeros(8, 8, dtype=torch.int64)
    for v in videos:
        confusion[v["label"], v["predicted"]] += 1
    assert confusion.tolist() == metrics["confusion"]


def test_predict_gives_each_video_the_class_and_probability_the_evaluation_scored(evaluated):
    """--run (results/tiny/train/model_final.pt here) with --json, paths relative to the current folder."""
    work, _, metrics = evaluated
    answered = done(clipflow("predict", *(f"videos/{name}" for name in VIDEOS), "--run", "tiny", "--json", cwd=work))
    assert answered.returncode == 0, answered.stderr
    assert answered.stderr == ""
    lines = [json.loads(line) for line in answered.stdout.splitlines()]
    assert [line["video"] for line in lines] == [f"videos/{name}" for name in VIDEOS]
    for line, scored in zip(lines, metrics["videos"], strict=True):
        top = line["top"]
        assert len(top) == 5 and set(top[0]) == {"label", "name", "probability"}
        assert top[0]["label"] == scored["predicted"], (line, scored)
        assert top[0]["probability"] == pytest.approx(scored["probability"], abs=1e-6)
        assert [t["name"] for t in top] == [CLASSES[t["label"]] for t in top]
        assert [t["probability"] for t in top] == sorted((t["probability"] for t in top), reverse=True)
        assert len({t["label"] for t in top}) == 5 and sum(t["probability"] for t in top) <= 1 + 1e-9


def test_an_unreadable_video_is_named_and_the_others_are_answered(evaluated, tmp_path):
    """A missing file, a text file and a folder among the videos: each named on stderr with its reason, the good
    ones answered in tables with the class names; exit 2. With --json each is a line of its own."""
    work, model, metrics = evaluated
    best = shutil.copy(model, tmp_path / "best.pt")  # --model: any model file clipflow wrote
    text = tmp_path / "notes.mp4"
    text.write_text("not a video\n")
    good = [str(work / "videos" / name) for name in VIDEOS]
    missing = str(tmp_path / "gone.mp4")
    videos = [good[0], missing, good[1], str(text), str(work / "videos"), good[2]]
    table = clipflow("predict", *videos, "--model", str(best), "--top", "3")
    jsonl = clipflow("predict", missing, good[2], "--model", str(best), "--json")
    table, jsonl = done(table), done(jsonl)
    assert table.returncode == 2 and "Traceback" not in table.stderr, table.stderr
    assert table.stderr.splitlines() == [
        f"clipflow: cannot read {missing}: file not found",
        f"clipflow: cannot read {text}: not a video file, or one cut short or damaged: no container format reads it",
        f"clipflow: cannot read {work / 'videos'}: a folder, not a video file (give the videos in it, e.g. "
        f"{work / 'videos'}/*.mp4)",
    ]
    blocks = [block.splitlines() for block in table.stdout.split("\n\n")]
    assert [block[0] for block in blocks] == good
    for block, scored in zip(blocks, metrics["videos"], strict=True):
        assert block[1].split() == ["rank", "class", "probability"] and len(block) == 2 + 3
        rank, *name, percent = block[2].split()
        assert rank == "1" and " ".join(name) == CLASSES[scored["predicted"]]
        assert percent == f"{100 * scored['probability']:.2f}%"
    assert jsonl.returncode == 2 and jsonl.stderr == "", jsonl.stderr
    gone, answered = (json.loads(line) for line in jsonl.stdout.splitlines())
    assert gone == {"video": missing, "error": "file not found"}
    assert answered["video"] == good[2] and answered["top"][0]["label"] == metrics["videos"][2]["predicted"]


def test_a_model_that_is_not_there_or_not_a_model_or_not_one_is_refused(evaluated, tmp_path, monkeypatch, capsys):
    """One refusal through the command (its line, its status, nothing on stdout); the others in this process: the
    package's message, argparse's through the command's parser."""
    work, model, _ = evaluated
    video = str(work / "videos/a.mp4")
    no_run = clipflow("predict", video, "--run", "other", cwd=work)
    notes = tmp_path / "notes.pt"
    notes.write_text("a text file\n")
    weights = tmp_path / "weights.pt"
    torch.save(torch.load(model, weights_only=True)["model"], weights)  # a state dict alone: no recipe
    monkeypatch.chdir(work)
    assert model_path("tiny", None) == Path("results/tiny/train/model_final.pt")
    assert model_path(None, str(notes)) == notes
    refusals = {
        ("../tiny", None): "--run '../tiny' is not a run name: run names one folder under results/ and logs/: letters",
        ("", None): "--run '' is not a run name",
        ("tiny", str(model)): "give exactly one of --run RUN and --model FILE (both given)",
        (None, None): "give exactly one of --run RUN and --model FILE (neither given)",
    }
    for (run, file), message in refusals.items():
        with pytest.raises(ClipflowError) as refused:
            model_path(run, file)
        assert str(refused.value).startswith(message), (run, file, str(refused.value))
    with pytest.raises(ClipflowError, match=rf"^model file {notes} cannot be loaded \(.*\); is it a model file "):
        predict([video], notes)
    with pytest.raises(ClipflowError) as refused:
        predict([video], weights)
    assert str(refused.value) == (
        f"model file {weights} cannot be loaded: it holds no model weights and recipe; is it a model file clipflow "
        "wrote (the train stage's model_final.pt or best.pt)?"
    )
    for args, message in {
        (video, "--run", "tiny", "--model", str(model)): "predict: argument --model: not allowed with argument --run",
        (video,): "predict: one of the arguments --run --model is required",
        ("--model", str(model)): "predict: the following arguments are required: VIDEO",
        (video, "--model", str(model), "--top", "0"): "predict: argument --top: '0' is not a whole number >= 1",
    }.items():
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args(["predict", *args])
        assert stopped.value.code == 2 and f"clipflow: error: {message}" in capsys.readouterr().err, args
    no_run = done(no_run)
    assert assert_refused(no_run) == (
        "clipflow: error: run 'other' has no final model: no results/other/train/model_final.pt; run the workflow "
        "first (or give --model FILE)"
    )
    assert no_run.stdout == ""


def test_class_names_come_from_the_model_file_else_the_label_numbers():
    assert class_names_of(["a", "b", "c"], 3) == ["a", "b", "c"]
    assert class_names_of(None, 3) == ["0", "1", "2"]  # a file written before training kept the names
    assert class_names_of(["a", "b"], 3) == ["0", "1", "2"]  # names of another model
    assert class_names_of(["a", 1, "c"], 3) == ["0", "1", "2"]


def test_the_package_answers_in_order_and_refuses_image_models_and_no_videos(evaluated, tmp_path):
    work, model, metrics = evaluated
    untitled = tmp_path / "untitled.pt"
    state = torch.load(model, weights_only=True)
    recipe = state["recipe"]
    torch.save({**state, "recipe": {**recipe, "model": {k: v for k, v in recipe["model"].items() if k != "classes"}}},
               untitled)  # fmt: skip
    answers = predict([work / "videos/ccc.mp4", tmp_path / "none.mp4", work / "videos/a.mp4"], untitled, top=20)
    assert [a.error for a in answers] == [None, "file not found", None]
    assert [len(a.top) for a in answers] == [8, 0, 8]  # --top past the classes: all of them
    assert answers[0].top[0].label == metrics["videos"][2]["predicted"]
    assert answers[0].top[0].name == str(answers[0].top[0].label)  # no names in the file: the numbers
    assert sum(g.probability for g in answers[2].top) == pytest.approx(1.0)
    image = tmp_path / "cifar.pt"
    recipe = load_recipe("resnet18_cifar10", {})
    torch.save({"model": build_model(recipe["model"]).state_dict(), "recipe": recipe}, image)
    refusal = r"is not a video model \(recipe resnet18_cifar10, data.kind image\): clipflow predict answers for video"
    with pytest.raises(ClipflowError, match=refusal):
        predict([work / "videos/a.mp4"], image)
    with pytest.raises(ClipflowError, match="no video given"):
        predict([], model)


def test_a_video_that_fails_while_scored_fails_alone(evaluated):
    """A video that changed after its probe (here: gone) is a failure of its own; the others keep their scores."""
    work, model, metrics = evaluated
    net, recipe = load_model(model)
    frames = probe(work / "videos/a.mp4")[0]
    entries = [VideoEntry(str(work / "videos/a.mp4"), 0, frames, 1), VideoEntry(str(work / "gone.mp4"), 0, 20, 2)]
    scored = _score(net, recipe, entries, 32, torch.device("cpu"))
    assert int(scored[1].argmax()) == metrics["videos"][0]["predicted"]
    assert f"video {work / 'gone.mp4'} (listed in the videos given line 2) does not exist" in scored[2]
