"""Evaluate a trained model on a list with the validation protocol: top-1 and top-5, clip level."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from clipflow.errors import ClipflowError
from clipflow.models import build_model
from clipflow.train.trainer import make_dataset
from clipflow.train.validate import ValShard


def load_model(path: str | Path) -> tuple[torch.nn.Module, dict]:
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        recipe = state["recipe"]
        model = build_model(recipe["model"])
        model.load_state_dict(state["model"])
    except FileNotFoundError:
        raise ClipflowError(f"model file {path} does not exist; run the train stage first") from None
    except Exception as exc:
        raise ClipflowError(f"model file {path} cannot be loaded ({str(exc).splitlines()[0]})") from None
    return model.eval(), recipe


def evaluate(
    model_path: str | Path, list_path: str | Path, root: str | Path, out: str | Path, batch_size: int = 0
) -> dict:
    model, recipe = load_model(model_path)
    dataset = make_dataset(recipe, Path(list_path), Path(root), "val", seed=0)
    whole = ValShard(dataset, 0, 1, batch_size or recipe["train"]["eval_batch_size"])  # one process: every video
    loss_sum, top1, top5, _ = (float(v) for v in whole.totals(model, recipe["model"]["num_classes"]))
    n = len(dataset)
    metrics = {
        "recipe": recipe["name"],
        "split": str(list_path),
        "num_videos": n,
        "protocol": "1 centre clip x 1 centre crop",
        "top1": top1 / n,
        "top5": top5 / n,
        "loss": loss_sum / n,
        "reference": recipe.get("reference", {}),
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
