"""The project's JSON schemas (YAML files in workflow/schemas/): validation that names the offending key, and
the defaults they own.

Every default of a setting lives once, in its schema: ``config.schema.yaml`` for config.yaml (the Snakefile
validates the config with it), ``recipe.schema.yaml`` for recipes, ``job.schema.yaml`` for the job files
workers start from. The command line takes its defaults from :func:`config_defaults` rather than restating
them.

Two keywords of clipflow's own (JSON Schema ignores them): ``x-fix`` on a setting is the fix its error message
ends with; ``x-merged-into: <schema>`` on a free-form mapping (the config's ``overrides``) names the schema its
values are typed by on the command line (:func:`typed_command_line`).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from clipflow import yaml12
from clipflow.errors import ClipflowError
from clipflow.textfile import read_bytes

REPO = Path(__file__).resolve().parents[2]
SCHEMAS_DIR = REPO / "workflow" / "schemas"


def load_yaml(path: str | Path, what: str) -> Any:
    """The YAML file ``path`` (a ``what``), its numbers read as YAML 1.2 writes them (:mod:`clipflow.yaml12`)."""
    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"{what} {path} does not exist")
    try:
        return yaml12.load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ClipflowError(f"{what} {path} is not valid YAML: {exc}") from None


@functools.cache
def schema(name: str) -> dict:
    """workflow/schemas/<name>, read once per process; its ``$id`` is its file, so that a ``$ref`` to
    ``other.schema.yaml#/...`` finds the other schema beside it."""
    return {**load_yaml(SCHEMAS_DIR / name, "schema"), "$id": _uri(name)}


def _uri(name: str) -> str:
    return f"{SCHEMAS_DIR.as_uri()}/{name}"


@functools.cache
def _registry() -> Registry:
    names = sorted(p.name for p in SCHEMAS_DIR.glob("*.schema.yaml"))
    return Registry().with_resources([(_uri(n), DRAFT202012.create_resource(schema(n))) for n in names])


def _fill_defaults(node: dict, data: Any) -> None:
    if not isinstance(data, dict):
        return
    for key, sub in node.get("properties", {}).items():
        if key not in data and "default" in sub:
            data[key] = copy.deepcopy(sub["default"])
        if key in data:
            _fill_defaults(sub, data[key])


def _dotted(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def check_finite(data: Any, what: str, path: tuple = ()) -> None:
    """No NaN or infinity anywhere in ``data``: JSON Schema's ``number`` takes them, and every bound holds for
    NaN (each comparison with it is false), so ``base_lr: .nan`` would pass the schema and fail in training."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ClipflowError(
            f"{what}: {_dotted(path)}: {data} is not a finite number; give a number "
            "(YAML's .nan and .inf and JSON's NaN and Infinity are refused everywhere)"
        )
    if isinstance(data, Mapping):
        for key, value in data.items():
            check_finite(value, what, (*path, key))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            check_finite(value, what, (*path, index))


def _message(err: jsonschema.ValidationError) -> str:
    """The validator's message, ended by the setting's ``x-fix`` when its schema has one (a pattern's regex is
    then left out: the fix says what is allowed)."""
    fix = err.schema.get("x-fix") if isinstance(err.schema, dict) else None
    if not fix:
        return err.message
    message = f"{err.instance!r} is refused" if err.validator == "pattern" else err.message
    return f"{message}; {fix}"


def validate(data: Any, schema_name: str, what: str) -> dict:
    """Validates against workflow/schemas/<schema_name> and returns a copy with the defaults filled in;
    an error names the offending key. NaN and infinities are refused anywhere (:func:`check_finite`)."""
    check_finite(data, what)
    validator = jsonschema.Draft202012Validator(schema(schema_name), registry=_registry())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        raise ClipflowError(f"{what}: {_dotted(err.absolute_path)}: {_message(err)}")
    data = copy.deepcopy(data)
    _fill_defaults(schema(schema_name), data)
    return data


# -- `--config` values, typed -------------------------------------------------------------------------------

_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"),
               (list, "array"), (Mapping, "object"))  # fmt: skip


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "")


def _branches(node: dict) -> list[dict]:
    return [node, *node.get("oneOf", []), *node.get("anyOf", [])]


def _wanted(node: dict) -> set[str]:
    """The JSON types a schema node accepts (empty: any)."""
    types: set[str] = set()
    for branch in _branches(node):
        kind = branch.get("type", [])
        types |= {kind} if isinstance(kind, str) else set(kind)
        types |= {_json_type(v) for v in [*branch.get("enum", []), *([branch["const"]] if "const" in branch else [])]}
    return types


def _accepts(types: set[str], value: Any) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


def _yaml_scalar(text: str) -> Any:
    """``text`` read as a YAML value with YAML 1.2's numbers (:mod:`clipflow.yaml12`): ``1e-3`` is a number,
    ``12:00:00``, ``0x2000`` and ``1_0`` stay as typed."""
    try:
        return yaml12.load(text)
    except yaml.YAMLError:
        return text


def _typed_scalar(value: Any, types: set[str]) -> Any:
    """One value of ``--config`` as its schema wants it: a string read as YAML unless a string is all it takes
    (where it also takes a string, only a YAML value of another type it takes replaces it: null, say)."""
    if isinstance(value, str):
        if not types or types == {"string"}:
            return value
        typed = _yaml_scalar(value)
        if "string" not in types:
            return typed
        return typed if not isinstance(typed, str) and _accepts(types, typed) else value
    if "string" in types and not _accepts(types, value) and _json_type(value) == "integer":
        return str(value)  # `run=2024`: Snakemake made it a number, the schema wants a name
    return value


def _typed(value: Any, node: dict) -> Any:
    if "x-merged-into" in node:
        node = schema(node["x-merged-into"])
    if isinstance(value, Mapping):
        properties = node.get("properties", {})
        return {key: _typed(sub, properties[key]) if key in properties else sub for key, sub in value.items()}
    if isinstance(value, list):
        items = next((b["items"] for b in _branches(node) if isinstance(b.get("items"), dict)), {})
        return [_typed(item, items) for item in value]
    return _typed_scalar(value, _wanted(node))


def typed_command_line(values: Mapping, schema_name: str = "config.schema.yaml") -> dict:
    """``--config`` values as the YAML types config.yaml would give them, where their schema wants those.

    Snakemake reads ``--config KEY=VALUE`` with int(), float(), True/False and then YAML's BaseLoader, which
    leaves every value inside a mapping or list a string: ``overrides={train: {epochs: 1}}`` arrives as
    ``{'train': {'epochs': '1'}}``. Each such string is read again as YAML, with YAML 1.2's numbers
    (:mod:`clipflow.yaml12`: ``12:00:00`` and ``0x2000`` stay text), where its setting's schema (for
    ``overrides``, the recipe schema) wants a number, a boolean or null; where it wants a string the text stays
    as it is, quoted or not. A top-level integer where a string is wanted (``run=2024``) becomes its digits.
    Keys the schema does not know are left alone, for validation to name."""
    return _typed(dict(values), schema(schema_name))


@functools.cache
def _config_defaults() -> dict:
    return validate({}, "config.schema.yaml", "the default config")


def config_setting(*path: str) -> dict:
    """The config schema's node of a setting, by its path (``"cluster", "root_port"``): its type, its range, its
    default (for the command line's checks of the same setting)."""
    node = schema("config.schema.yaml")
    for key in path:
        node = node["properties"][key]
    return node


def config_enum(*path: str) -> tuple[str, ...]:
    """The values a setting of config.yaml may take, in the config schema's order (``"train", "kvstore"``): the one
    list that the command line's choices and the code's checks of the same setting read."""
    return tuple(config_setting(*path)["enum"])


def policy_names() -> tuple[str, ...]:
    """The names of a run's policy settings (how it goes on across failures, resizes and notices; config.yaml's
    train section), as job.schema.yaml's ``policy`` lists them: what `train launch` takes as flags and the train
    rule passes."""
    return tuple(schema("job.schema.yaml")["properties"]["policy"]["properties"])


def config_defaults(section: str) -> dict:
    """The default settings of one section of config.yaml (``cluster``, ``train``, ``data``), from its schema."""
    return copy.deepcopy(_config_defaults()[section])


def read_checked_json(path: str | Path, schema_name: str, what: str, fix: str) -> dict:
    """The JSON file at ``path`` validated against ``schema_name``; every problem is named with ``what`` (the
    file's kind) and its path, followed by ``fix`` (how to get a good one)."""
    path = Path(path)
    try:
        raw = read_bytes(path, what)  # missing, a folder, unreadable: said in words
    except ClipflowError as exc:
        raise ClipflowError(f"{exc}; {fix}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ClipflowError(f"{what} {path} cannot be read ({exc}); {fix}") from None
    try:
        return validate(data, schema_name, f"{what} {path}")
    except ClipflowError as exc:
        raise ClipflowError(f"{exc}; {fix}") from None
