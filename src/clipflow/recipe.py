"""Recipes: load `recipes/<name>.yaml`, apply overrides, validate against the schema, fill defaults."""

from __future__ import annotations

import copy
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.schemas import REPO, load_yaml, validate

RECIPES_DIR = REPO / "recipes"


def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def recipe_path(name_or_path: str, recipes_dir: str | Path = RECIPES_DIR) -> Path:
    """A recipe name (`<recipes_dir>/<name>.yaml`) or a path to a recipe file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    path = Path(recipes_dir) / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in Path(recipes_dir).glob("*.yaml"))) or "none"
        raise ClipflowError(f"unknown recipe {name_or_path!r}: no file {path}; known recipes: {known}")
    return path


def load_recipe(name_or_path: str, overrides: dict | None = None, recipes_dir: str | Path = RECIPES_DIR) -> dict:
    path = recipe_path(name_or_path, recipes_dir)
    data = load_yaml(path, "recipe")
    if not isinstance(data, dict):
        raise ClipflowError(f"recipe {path} must be a mapping of sections (model, data, train)")
    if overrides:
        data = deep_merge(data, overrides)
    return check_recipe(data, f"recipe {path.name}" + (" with overrides" if overrides else ""))


def check_recipe(data: object, what: str) -> dict:
    """``data`` validated as a recipe, with the schema's defaults filled in; ``what`` names it in errors."""
    recipe = validate(data, "recipe.schema.yaml", what)
    check_data_kind(recipe, what)
    check_optimizer(recipe, what)
    check_pathways(recipe, what)
    return recipe


def check_data_kind(recipe: dict, what: str) -> None:
    """An image model takes images (data.kind image, whose settings must make an image spec), a video model
    clips."""
    from clipflow.data.cifar.transforms import ImageSpec
    from clipflow.models.builder import is_image_model

    name, kind = recipe["model"]["name"], recipe["data"]["kind"]
    images = is_image_model(name)
    if images != (kind == "image"):
        raise ClipflowError(
            f"{what}: model {name} classifies {'images' if images else 'video clips'} but data.kind is {kind}; "
            f"set data.kind: {'image' if images else 'video'}"
        )
    if images:
        try:
            ImageSpec.from_recipe(recipe)
        except ClipflowError as exc:
            raise ClipflowError(f"{what}: {exc}") from None


def check_optimizer(recipe: dict, what: str) -> None:
    """Nesterov is SGD's: an adam recipe that asks for it is refused (the schema fills the other defaults)."""
    if recipe["train"]["optimizer"] == "adam" and recipe["train"]["nesterov"]:
        raise ClipflowError(f"{what}: train.nesterov is an SGD setting; the recipe's optimizer is adam")


def check_pathways(recipe: dict, what: str) -> None:
    """A SlowFast model's alpha must be the ratio of the data's slow to fast temporal strides: its lateral
    connections stride the fast frames by alpha onto the slow ones."""
    from clipflow.models.builder import slowfast_alpha

    alpha = slowfast_alpha(recipe["model"])
    if alpha is None:
        return
    slow, fast = recipe["data"]["slow_temporal_stride"], recipe["data"]["fast_temporal_stride"]
    if slow != alpha * fast:
        raise ClipflowError(
            f"{what}: data.slow_temporal_stride {slow} / data.fast_temporal_stride {fast} must be model "
            f"{recipe['model']['name']}'s alpha {alpha} (the fast pathway has alpha times the slow one's frames)"
        )
