"""The project's JSON schemas (YAML files in workflow/schemas/): validation that names the offending key, and
the defaults they own.

Every default of a setting lives once, in its schema: ``config.schema.yaml`` for config.yaml (the Snakefile
validates the config with it), ``recipe.schema.yaml`` for recipes, ``job.schema.yaml`` for the job files
workers start from. The command line takes its defaults from :func:`config_defaults` rather than restating
them.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from clipflow.errors import ClipflowError

REPO = Path(__file__).resolve().parents[2]
SCHEMAS_DIR = REPO / "workflow" / "schemas"


def load_yaml(path: str | Path, what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"{what} {path} does not exist")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
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


def validate(data: Any, schema_name: str, what: str) -> dict:
    """Validates against workflow/schemas/<schema_name> and returns a copy with the defaults filled in;
    an error names the offending key."""
    validator = jsonschema.Draft202012Validator(schema(schema_name), registry=_registry())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ClipflowError(f"{what}: {where}: {err.message}")
    data = copy.deepcopy(data)
    _fill_defaults(schema(schema_name), data)
    return data


@functools.cache
def _config_defaults() -> dict:
    return validate({}, "config.schema.yaml", "the default config")


def config_defaults(section: str) -> dict:
    """The default settings of one section of config.yaml (``cluster``, ``train``, ``data``), from its schema."""
    return copy.deepcopy(_config_defaults()[section])


def read_checked_json(path: str | Path, schema_name: str, what: str, fix: str) -> dict:
    """The JSON file at ``path`` validated against ``schema_name``; every problem is named with ``what`` (the
    file's kind) and its path, followed by ``fix`` (how to get a good one)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClipflowError(f"{what} {path} does not exist; {fix}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ClipflowError(f"{what} {path} cannot be read ({exc}); {fix}") from None
    try:
        return validate(data, schema_name, f"{what} {path}")
    except ClipflowError as exc:
        raise ClipflowError(f"{exc}; {fix}") from None
