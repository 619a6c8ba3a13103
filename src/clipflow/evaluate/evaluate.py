"""Evaluate a trained model on a list with the recipe's test protocol, split over workers and gathered.

Worker ``rank`` of ``W`` scores videos ``rank, rank + W, ...`` of the list with every view of the test
protocol (clipflow.evaluate.protocol); each fills its rows of zero tensors, one row a video (mean
probabilities, view hits, loss), and a sum over the workers (torch.distributed, whatever back end
trained the model) gives every worker the whole list's rows. Rank 0 turns them into the numbers
(clipflow.evaluate.metrics) and writes metrics.json. One process is the same with W = 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from clipflow.checksums import damage, write_text_with_checksum
from clipflow.data.build import build_dataset
from clipflow.data.listfile import read_list
from clipflow.errors import ClipflowError
from clipflow.evaluate.classes import class_names
from clipflow.evaluate.metrics import video_metrics
from clipflow.evaluate.protocol import protocol_of
from clipflow.files import check_output_file
from clipflow.models.builder import build_model
from clipflow.models.scoring import score_videos
from clipflow.recipe import check_recipe, fit_to_videos
from clipflow.safe_load import load_weights_only

WHICH = "is it a model file clipflow wrote (the train stage's model_final.pt or best.pt)?"  # for one that is not


class OneProcess:
    """The collectives of a single worker: its sums are the totals."""

    rank, num_workers = 0, 1

    def all_sum(self, name: str, tensor: torch.Tensor) -> None:
        pass


def load_model(path: str | Path, recipe: dict | None = None) -> tuple[torch.nn.Module, dict]:
    """The model ``path`` holds (weights only: clipflow.safe_load) and its recipe (whose ``model.classes`` names the
    classes, when the data had a class index); ClipflowError naming the file when it is missing, damaged (its
    ``.sha256`` records other bytes), wants more than weights, or does not load. With ``recipe`` (``--weights``):
    ``path`` is any weights file (clipflow.models.weights, imported ones too) and ``recipe`` its test protocol."""
    if recipe is not None:
        return weights_model(path, recipe)
    path = Path(path)
    try:
        damaged = damage(path)
        if damaged:
            raise ClipflowError(f"model file {path} is {damaged}; run the train stage again, or restore a good copy")
        state = load_weights_only(path, "model file")
        if not isinstance(state, dict) or not {"model", "recipe"} <= state.keys():
            raise ClipflowError(f"model file {path} cannot be loaded: it holds no model weights and recipe; {WHICH}")
        recipe = check_recipe(state["recipe"], f"model file {path}'s recipe")  # an older file's: defaults filled
        model = build_model(recipe["model"])
        model.load_state_dict(state["model"])
    except FileNotFoundError:
        raise ClipflowError(f"model file {path} does not exist; run the train stage first") from None
    except ClipflowError:
        raise
    except Exception as exc:
        raise ClipflowError(f"model file {path} cannot be loaded ({str(exc).splitlines()[0]}); {WHICH}") from None
    return model.eval(), recipe


def weights_model(path: str | Path, recipe: dict) -> tuple[torch.nn.Module, dict]:
    """The network of ``recipe`` with the weights of ``path`` (the weights' classes, names and count), checked to
    fit (clipflow.models.weights.check_fits); the recipe, its model section as the weights have it."""
    from clipflow.models.weights import check_fits, read_weights

    weights = read_weights(path, "--weights")
    check_fits(weights, recipe["model"], "--weights")
    kept = {k: v for k, v in recipe["model"].items() if k not in ("num_classes", "classes")}
    section = {**kept, **{k: weights.model[k] for k in ("num_classes", "classes") if k in weights.model}}
    model = build_model(section)
    try:
        model.load_state_dict(weights.state)
    except RuntimeError as exc:
        lines = str(exc).splitlines()
        raise ClipflowError(f"--weights {path} does not load into {section['name']}: "
                            f"{(lines[1:] or lines)[0].strip()}") from None  # fmt: skip
    return model.eval(), {**recipe, "model": section}


def check_batch_size(batch_size: int | None) -> None:
    if batch_size is not None and batch_size < 1:
        raise ClipflowError(f"--batch-size must be >= 1 (views a forward pass), got {batch_size}")


def open_list(recipe: dict, list_path: str | Path, root: str | Path, rank: int = 0, num_workers: int = 1):
    """The test-mode dataset of ``list_path``, its labels and its paths (as the list writes them); a bad line, a
    label the model cannot predict or a missing video of worker ``rank``'s share (entries rank, rank + num_workers,
    ...: all by default) is named here, before any scoring. A host with its own disk holds only its workers'
    share."""
    list_path, classes = Path(list_path), recipe["model"]["num_classes"]
    recipe = fit_to_videos(recipe, root, f"the recipe of {recipe['name']}")
    entries = read_list(list_path)
    for e in entries:
        if not 0 <= e.label < classes:
            raise ClipflowError(
                f"{list_path} line {e.line}: label {e.label}, but the model ({recipe['name']}) has {classes} classes "
                f"(labels 0..{classes - 1}); is this the list the model was trained for?"
            )
    dataset = build_dataset(recipe, list_path, root, "test", seed=0)
    videos = getattr(dataset, "entries", [])  # videos; an image dataset checks its batch files itself
    for e in videos[rank::num_workers]:
        if not e.resolve(root).is_file():
            raise ClipflowError(f"video {e.resolve(root)} (listed in {list_path} line {e.line}) does not exist")
    return dataset, torch.tensor([e.label for e in entries], dtype=torch.int64), [e.path for e in entries]


def check_out(out: str | Path) -> Path:
    """``out`` as metrics.json's path, refused before any scoring when it cannot be written there (a folder, or
    under a file): the whole evaluation would run first and fail at its last step."""
    return check_output_file(out, "--out", "metrics.json")


def check_inputs(model_path: str | Path, list_path: str | Path, root: str | Path, batch_size: int | None,
                 out: str | Path, recipe: dict | None = None) -> None:  # fmt: skip
    """Every check a worker would make before scoring, made once (by the launcher)."""
    check_out(out)
    check_batch_size(batch_size)
    _, recipe = load_model(model_path, recipe)
    open_list(recipe, list_path, root)


def evaluate(
    model_path: str | Path,
    list_path: str | Path,
    root: str | Path,
    out: str | Path,
    batch_size: int | None = None,
    comm=None,
    device: torch.device | None = None,
    recipe: dict | None = None,
) -> dict | None:
    """Scores this worker's share and gathers every worker's; rank 0 writes ``out`` and returns the metrics,
    the other ranks return None. ``batch_size``: views a forward pass (whole videos, at least one;
    default the recipe's eval_batch_size). ``comm``: the collectives (DDPComm), None for one process.
    ``recipe``: ``model_path`` is a weights file scored with this recipe's test protocol (``--weights``)."""
    comm = comm or OneProcess()
    if comm.rank == 0:  # the one that writes it
        check_out(out)
    check_batch_size(batch_size)
    device = device or torch.device("cpu")
    model, recipe = load_model(model_path, recipe)
    model.to(device)
    dataset, labels, paths = open_list(recipe, list_path, root, comm.rank, comm.num_workers)
    n, classes = len(dataset), recipe["model"]["num_classes"]
    names = class_names(list_path, classes)  # a bad class index fails before the scoring, on every worker
    share = list(range(comm.rank, n, comm.num_workers))
    t = recipe["train"]
    scored = score_videos(model, dataset, share, batch_size or t["eval_batch_size"], device, classes,
                          t.get("loader_workers", 0), t.get("loader_prefetch", 2))  # fmt: skip
    gathered = [torch.zeros(n, classes, dtype=torch.float64), torch.zeros(n, 2, dtype=torch.int64),
                torch.zeros(n, dtype=torch.float64)]  # fmt: skip
    for name, whole, mine in zip(("probs", "hits", "loss"), gathered, scored, strict=True):
        whole[share] = mine
        comm.all_sum(f"evaluate_{name}", whole)
    if comm.rank != 0:
        return None
    metrics = {
        "recipe": recipe["name"],
        "split": str(list_path),
        "num_videos": n,
        "num_views": dataset.views,
        "workers": comm.num_workers,
        "protocol": protocol_of(recipe),
        **video_metrics(*gathered, labels, dataset.views, names, paths),
        "reference": recipe.get("reference", {}),
    }
    write_text_with_checksum(out, json.dumps(metrics, indent=2) + "\n")  # its checksum: copies are checked
    return metrics
