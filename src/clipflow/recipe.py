"""Recipes: load `recipes/<name>.yaml`, apply overrides, validate against the schema, fill defaults, and check
what the schema cannot say: the model takes the data's kind, every pathway gets frames, the crop fits in the
frames, the clip's span fits in the data's videos where they are known."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.schemas import REPO, load_yaml, validate

RECIPES_DIR = REPO / "recipes"
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a file name in recipes/, without '/' and not '.' or '..'


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
    check_recipe_name(name_or_path)
    path = Path(recipes_dir) / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in Path(recipes_dir).glob("*.yaml"))) or "none"
        raise ClipflowError(f"unknown recipe {name_or_path!r}: no file {path}; known recipes: {known}")
    return path


def check_recipe_name(name: str) -> None:
    """A recipe name stays in recipes/: ``../x`` or ``a/b`` would read a file elsewhere."""
    if not NAME.fullmatch(name):
        raise ClipflowError(
            f"recipe {name!r} is not a recipe name: a name is a file of recipes/ without .yaml (letters, digits, "
            "'_', '-', '.'; no '/', not starting with '.'); give one, or the path of an existing .yaml recipe file"
        )


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
    if recipe["data"]["kind"] == "video":
        check_clip(recipe, what)
        check_crop(recipe, what)
    return recipe


def check_data_kind(recipe: dict, what: str) -> None:
    """An image model takes images (data.kind image, whose settings must make an image spec), a video model
    clips."""
    from clipflow.models.cards import is_image_model

    name, kind = recipe["model"]["name"], recipe["data"]["kind"]
    images = is_image_model(name)
    if images != (kind == "image"):
        raise ClipflowError(
            f"{what}: model {name} classifies {'images' if images else 'video clips'} but data.kind is {kind}; "
            f"set data.kind: {'image' if images else 'video'}"
        )
    if images:
        from clipflow.data.cifar.transforms import ImageSpec  # torch's and torchvision's import: image recipes only

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
    from clipflow.models.slowfast_spec import slowfast_alpha

    alpha = slowfast_alpha(recipe["model"])
    if alpha is None:
        return
    slow, fast = recipe["data"]["slow_temporal_stride"], recipe["data"]["fast_temporal_stride"]
    if slow != alpha * fast:
        raise ClipflowError(
            f"{what}: data.slow_temporal_stride {slow} / data.fast_temporal_stride {fast} must be model "
            f"{recipe['model']['name']}'s alpha {alpha} (the fast pathway has alpha times the slow one's frames)"
        )


def check_clip(recipe: dict, what: str) -> None:
    """The sampling settings as the loader will take them (ClipSpec), and each pathway of the model gets at least
    one frame of the span: the fast one every fast_temporal_stride-th frame, the slow one (SlowFast) every
    slow_temporal_stride-th."""
    from clipflow.data.sampling import ClipSpec
    from clipflow.models.slowfast_spec import slowfast_alpha

    try:
        ClipSpec.from_recipe(recipe).on_every(recipe["data"]["videos_keep_every"])
    except ClipflowError as exc:
        raise ClipflowError(f"{what}: {exc}") from None
    data = recipe["data"]
    two = slowfast_alpha(recipe["model"]) is not None
    pathway, stride = ("slow", "slow_temporal_stride") if two else ("fast", "fast_temporal_stride")
    if data["new_length"] < data[stride]:
        raise ClipflowError(
            f"{what}: data.new_length {data['new_length']} gives the {pathway} pathway no frame: it takes every "
            f"data.{stride}-th ({data[stride]}) frame of the span; set new_length to at least {data[stride]}"
        )


def check_crop(recipe: dict, what: str) -> None:
    """Every mode's crops can be cut from frames decoded at new_width x new_height (the loader's own check,
    made here before any stage instead of when validation or evaluation first opens the data)."""
    from clipflow.data.transforms import TransformSpec

    data = recipe["data"]
    try:
        spec = TransformSpec.from_recipe(recipe)
        for mode in ("train", "val", "test"):
            spec.check_frame(data["new_height"], data["new_width"], mode)
    except ClipflowError as exc:
        raise ClipflowError(f"{what}: {exc}") from None


def fit_to_data(recipe: dict, count: int | None, names: list[str] | None, where: str, what: str) -> dict:
    """The recipe with the data's classes (``count`` of them, named by ``names`` when the data has a class index;
    ``where`` says where they were found): ``model.num_classes`` and ``model.classes`` filled in where the recipe
    leaves them out. A recipe that fixes another number or other names is refused, naming both and the way out."""
    model = dict(recipe["model"])
    fixed = model.get("num_classes")
    if count is None:
        if fixed is None:
            raise ClipflowError(
                f"{what} leaves model.num_classes to the data, but {where} does not say how many classes the data has; "
                "scan the data again with this clipflow (snakemake --forcerun data_scan), or set model.num_classes"
            )
        count = fixed
    if fixed is not None and fixed != count:
        raise ClipflowError(
            f"{what} has model.num_classes {fixed} but the data has {count} classes ({where}): leave num_classes out "
            f"of the recipe to take the data's, or set it to {count} (overrides: {{model: {{num_classes: {count}}}}})"
        )
    given = model.get("classes")
    if given is not None and names is not None and list(given) != list(names):
        differ = next(i for i, (a, b) in enumerate(itertools.zip_longest(given, names)) if a != b)
        in_recipe, in_data = (n[differ] if differ < len(n) else "absent" for n in (given, names))
        raise ClipflowError(
            f"{what} names its classes (model.classes) otherwise than the data ({where}): label {differ} is "
            f"{in_recipe!r} in the recipe but {in_data!r} in the data; leave model.classes out to take the data's"
        )
    model["num_classes"] = count
    if given is None and names is not None:
        model["classes"] = list(names)
    if model.get("classes") is not None and len(model["classes"]) != count:
        raise ClipflowError(f"{what}: model.classes names {len(model['classes'])} classes but num_classes is {count}")
    return {**recipe, "model": model}


def fit_to_index(recipe: dict, train_list: str | Path | None, what: str) -> dict:
    """The recipe with the classes of the data whose index holds ``train_list`` (its manifest.json:
    :func:`fit_to_data`); without an index, a recipe that fixes num_classes as it is, one that does not refused."""
    from clipflow.data.classes import index_classes

    found = index_classes(train_list) if train_list else None
    if found is None:
        if "num_classes" not in recipe["model"]:
            raise ClipflowError(
                f"{what} leaves model.num_classes to the data, but no scanned index gives it: give the training list "
                "of a scanned index (manifest.json beside it: train launch's --train-list), or set model.num_classes"
            )
    else:
        recipe = fit_to_data(recipe, found.count, found.names, found.source, what)
    if recipe["data"].get("fit_step") and train_list:
        recipe = fit_step(recipe, train_list)
    return recipe


def fit_to_videos(recipe: dict, root: str | Path, what: str) -> dict:
    """The recipe with data.videos_keep_every the frame step the videos under ``root`` were re-encoded with (its
    re-encode journal), checked against the clips; as it is where ``root`` holds no re-encode's record (a host's
    staged copy keeps the step the run started with)."""
    if recipe["data"]["kind"] != "video":
        return recipe
    from clipflow.data.reencode import frame_step_of

    step = frame_step_of(root)
    if step is None or step == recipe["data"]["videos_keep_every"]:
        return recipe
    fitted = {**recipe, "data": {**recipe["data"], "videos_keep_every": step}}
    check_clip(fitted, f"{what} on the videos of {root}")
    return fitted


def fit_step(recipe: dict, train_list: str | Path) -> dict:
    """The recipe with data.new_step the largest step, up to its own, whose span fits in the median video of the
    scanned ``train_list`` (data.fit_step), at least 1."""
    import statistics

    from clipflow.data.listfile import read_list

    frames = [entry.num_frames for entry in read_list(train_list) if entry.num_frames is not None]
    if not frames:
        return recipe
    data = recipe["data"]
    step = max(1, min(data["new_step"], int(statistics.median(frames)) // data["new_length"]))
    return {**recipe, "data": {**data, "new_step": step}}


def span_frames(recipe: dict) -> int:
    """The frames a video needs for a clip that repeats no frame: each of num_segments chunks holds a span of
    new_length x new_step frames, the chunks' starts at least a frame apart (GluonCV's sampling)."""
    data = recipe["data"]
    return data["new_length"] * data["new_step"] + data["num_segments"] - 1


def check_span(recipe: dict, longest: int, where: str, what: str) -> None:
    """The clip's span must fit in the longest video of the data (``where`` names it): a video shorter than the
    span repeats its last frame, so a span longer than every video is a setting to fix, not the data's nature."""
    if recipe["data"]["kind"] != "video" or span_frames(recipe) <= longest:
        return
    data = recipe["data"]
    segments = f" + data.num_segments {data['num_segments']} - 1" if data["num_segments"] > 1 else ""
    raise ClipflowError(
        f"{what}: a clip spans {span_frames(recipe)} frames (data.new_length {data['new_length']} x data.new_step "
        f"{data['new_step']}{segments}) but the longest video {where} has {longest}: every clip would repeat "
        "frames; shorten new_length or new_step, or use longer videos"
    )


def check_span_in_lists(recipe: dict, lists: Iterable[str | Path], what: str) -> None:
    """:func:`check_span` against the longest video of scanned lists (``path num_frames label``); lists
    without frame counts are passed over."""
    from clipflow.data.listfile import read_list

    counted = [(entry.num_frames, str(path)) for path in lists for entry in read_list(path)
               if entry.num_frames is not None]  # fmt: skip
    if counted:
        longest, path = max(counted)
        check_span(recipe, longest, f"in {path}", what)
