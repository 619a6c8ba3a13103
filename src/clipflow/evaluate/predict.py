"""`clipflow predict`: a trained video model's top classes for each of some video files, under the recipe's test
protocol: the same views (``test_clips x test_crops``) and the same ensemble (the mean of the views' softmax
probabilities, :func:`clipflow.models.scoring.score_videos`) that the evaluation scores, so a video of the val
list gets here the top-1 that metrics.json's ``videos`` records for it.

Each video is first decoded whole with the recipe's decoder (:func:`clipflow.data.scan.probe`, as the scan
counts the frames the lists hold); one that cannot be read (missing, a folder, not a video, damaged) becomes a
:class:`Prediction` with the reason, and the others are still answered.

Class names: the recipe a model file holds names its classes (``model.classes``, label i the i-th: training fills
them in from the data's class index); without a name for every class of the model (data without a class index, an
older file) each label's number stands for its name. Image recipes (CIFAR) are refused: this is for videos.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from clipflow.data.build import build_dataset
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.evaluate.evaluate import check_batch_size, load_model
from clipflow.models.scoring import score_videos

MODEL_OF_A_RUN = ("train", "model_final.pt")  # under results/<run>/, as the workflow's train rule writes it
GIVEN = Path("the videos given")  # what a video of the command line is "listed in", in the dataset's messages


@dataclass(frozen=True)
class Guess:
    """One class of a video's answer: its label, its name and its mean probability over the test views."""

    label: int
    name: str
    probability: float


@dataclass(frozen=True)
class Prediction:
    """The answer for one video (``video`` as given): its ``top`` classes, most probable first, or the
    ``error`` that kept it from being read (then ``top`` is empty)."""

    video: str
    top: list[Guess] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict:
        """{"video", "top": [{"label", "name", "probability"}, ...]} or {"video", "error"}."""
        if self.error is not None:
            return {"video": self.video, "error": self.error}
        return {"video": self.video, "top": [vars(g) for g in self.top]}

    def lines(self) -> list[str]:
        """The answer as a table: the video, then a row a class (rank, name, probability in %); for a video
        that could not be read, the error line the command prints on stderr."""
        if self.error is not None:
            return [f"clipflow: cannot read {self.video}: {self.error}"]
        width = max(len("class"), *(len(g.name) for g in self.top))
        rows = [f"  {rank:>4}  {g.name:<{width}}  {100 * g.probability:>10.2f}%" for rank, g in enumerate(self.top, 1)]
        return [self.video, f"  rank  {'class':<{width}}  probability", *rows]


def run_model(run: str, results: str | Path = "results") -> Path:
    """The final model of the workflow's run ``run``: ``results/<run>/train/model_final.pt``. ClipflowError when
    ``run`` is not a plain run name (a folder of ``results``), or the run has no final model yet."""
    from clipflow.schemas import config_setting

    setting = config_setting("run")  # the name config.yaml's run: may take
    if not re.fullmatch(setting["pattern"], run):
        raise ClipflowError(f"--run {run!r} is not a run name: {setting['x-fix']}")
    path = Path(results, run, *MODEL_OF_A_RUN)
    if not path.is_file():
        raise ClipflowError(f"run {run!r} has no final model: no {path}; run the workflow first (or give --model FILE)")
    return path


def model_path(run: str | None, model: str | Path | None, results: str | Path = "results") -> Path:
    """The model file of exactly one of ``run`` (a run name, :func:`run_model`) and ``model`` (a model file
    clipflow wrote: model_final.pt or best.pt); ClipflowError for both or neither."""
    if (run is None) == (model is None):
        both = "both" if run is not None else "neither"
        raise ClipflowError(f"give exactly one of --run RUN and --model FILE ({both} given)")
    return run_model(run, results) if run is not None else Path(model)


def class_names_of(held: object, classes: int) -> list[str]:
    """The model's ``classes`` names: ``held`` (its recipe's ``model.classes``) when it is a list of exactly
    ``classes`` names, else the label numbers ("0", "1", ...)."""
    if isinstance(held, list | tuple) and len(held) == classes and all(isinstance(n, str) for n in held):
        return list(held)
    return [str(i) for i in range(classes)]


def _frames(path: Path, decoder: str) -> int:
    """The frames of ``path`` as the scan counts them (decoded whole with ``decoder``); VideoFileError (a
    ValueError) or OSError with the reason in the user's words when it cannot be read."""
    from clipflow.data.reader import VideoFileError
    from clipflow.data.scan import probe

    if path.is_dir():
        raise VideoFileError(f"a folder, not a video file (give the videos in it, e.g. {path}/*.mp4)")
    return probe(path, decoder)[0]


def _score(model: torch.nn.Module, recipe: dict, entries: list[VideoEntry], batch_size: int,
           device: torch.device) -> dict[int, torch.Tensor | str]:  # fmt: skip
    """Each entry's mean probabilities under the test protocol, by its line, or the reason it could not be
    scored. All are scored together (batches of whole videos, as the evaluation makes them); when that fails
    (a video that changed since it was probed), each one alone, so that only the failing ones are failures."""
    classes, t = recipe["model"]["num_classes"], recipe["train"]

    def scored(some: list[VideoEntry]) -> torch.Tensor:
        dataset = build_dataset(recipe, GIVEN, "/", "test", seed=0, entries=some)
        return score_videos(model, dataset, range(len(some)), batch_size, device, classes,
                            t.get("loader_workers", 0), t.get("loader_prefetch", 2))[0]  # fmt: skip

    if not entries:
        return {}
    try:
        return dict(zip((e.line for e in entries), scored(entries), strict=True))
    except ClipflowError as exc:
        if len(entries) == 1:
            return {entries[0].line: str(exc)}
    out: dict[int, torch.Tensor | str] = {}
    for entry in entries:
        try:
            out[entry.line] = scored([entry])[0]
        except ClipflowError as exc:
            out[entry.line] = str(exc)
    return out


def predict(
    videos: Sequence[str | Path],
    model_file: str | Path,
    top: int = 5,
    device: torch.device | None = None,
    batch_size: int | None = None,
) -> list[Prediction]:
    """Each of ``videos`` (in that order) answered by the model of ``model_file``: its ``top`` most probable
    classes (at most the model's classes) under the recipe's test protocol, or why it could not be read.
    ``batch_size``: views a forward pass (default the recipe's train.eval_batch_size). ClipflowError, before any
    video is read, for no videos, a ``top`` under 1, a model file that does not load, or an image model."""
    if not videos:
        raise ClipflowError("no video given: name one or more video files")
    if top < 1:
        raise ClipflowError(f"--top must be >= 1 (classes a video), got {top}")
    check_batch_size(batch_size)
    model, recipe = load_model(model_file)
    kind = recipe["data"]["kind"]
    if kind != "video":
        raise ClipflowError(
            f"model file {model_file} is not a video model (recipe {recipe['name']}, data.kind {kind}): clipflow "
            "predict answers for video files; score images with `clipflow evaluate` on their list"
        )
    device = device or torch.device("cpu")
    model.to(device)
    classes = recipe["model"]["num_classes"]
    names = class_names_of(recipe["model"].get("classes"), classes)
    failed: dict[int, str] = {}
    entries = []
    for line, video in enumerate(videos, start=1):
        path = Path(video).absolute()
        try:
            entries.append(VideoEntry(str(path), 0, _frames(path, recipe["data"]["decoder"]), line))
        except (ValueError, OSError) as exc:
            failed[line] = str(exc)
    scored = _score(model, recipe, entries, batch_size or recipe["train"]["eval_batch_size"], device)
    answers = []
    for line, video in enumerate(videos, start=1):
        probs = scored.get(line, failed.get(line))
        if not isinstance(probs, torch.Tensor):
            answers.append(Prediction(str(video), error=str(probs)))
            continue
        best = probs.topk(min(top, classes))
        answers.append(Prediction(str(video), [Guess(int(i), names[int(i)], float(p))
                                               for p, i in zip(best.values, best.indices, strict=True)]))  # fmt: skip
    return answers
