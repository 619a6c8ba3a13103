"""Where the workflow's config enters, once (the Snakefile calls :func:`entered_config` before any rule reads it):
every setting as the user typed it, checked by its schema, the settings with a form of their own parsed.

Snakemake reads config.yaml and ``--configfile`` files with PyYAML, by YAML 1.1 (``time_limit: 12:00:00`` arrives
as 43200, ``0x2000`` as 8192, ``1_0`` as 10), and a top-level ``--config KEY=VALUE`` with Python's ``int()`` (so
``run=1_0`` arrives as 10), while a value inside a ``--config`` mapping arrives as the string typed. So:

* the config files are read again with YAML 1.2's numbers (:mod:`clipflow.yaml12`), and each value YAML 1.1 read
  as another one is put back as YAML 1.2 reads it, where no later file or ``--config`` value set it;
* the ``--config`` values are read again from the command line's own words (``workflow.config_settings
  .config_args``): each value as typed (a mapping or list as YAML's BaseLoader reads it, every value inside a
  string, as Snakemake does), then typed by its setting's schema (:func:`clipflow.schemas.typed_command_line`);
* the whole config is validated with its defaults (:func:`clipflow.schemas.validate`), ``cluster.slurm.time_limit``
  becomes minutes (:func:`clipflow.hosts.slurm_resources.time_limit_minutes`) and the Slurm notice is checked
  against the time limit and ``train.stop_grace`` (:func:`clipflow.hosts.slurm_resources.check_notice`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from clipflow import yaml12
from clipflow.hosts.slurm_resources import check_notice, time_limit_minutes
from clipflow.schemas import typed_command_line, validate

Path_ = tuple[str | int, ...]


def _leaves(old: Any, new: Any, path: Path_ = ()) -> Iterable[tuple[Path_, Any, Any]]:
    """(path, YAML 1.1's value, YAML 1.2's value) for every value a file sets: mappings are merged key by key (as
    Snakemake merges config files), anything else, lists included, is set whole."""
    if isinstance(new, Mapping) and isinstance(old, Mapping) and len(old) == len(new):
        for (old_key, old_value), (key, value) in zip(old.items(), new.items(), strict=True):
            if old_key == key:
                yield from _leaves(old_value, value, (*path, key))
        return
    yield path, old, new


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b if not isinstance(a, list | dict) else repr(a) == repr(b))


def _get(config: Any, path: Path_) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(config, Mapping) or key not in config:
            return False, None
        config = config[key]
    return True, config


def _set(config: dict, path: Path_, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


def file_values_as_typed(texts: Iterable[str]) -> dict[Path_, tuple[Any, Any]]:
    """For the config files' texts, in the order Snakemake merges them: {path: (YAML 1.1's value, YAML 1.2's)}
    for every value whose last setter's text YAML 1.1 reads as another value than YAML 1.2 does."""
    changed: dict[Path_, tuple[Any, Any]] = {}
    for text in texts:
        try:
            old, new = yaml.safe_load(text), yaml12.load(text)
        except yaml.YAMLError:
            continue  # Snakemake names a file that is not YAML
        for path, was, value in _leaves(old, new):
            for earlier in [p for p in changed if p[: len(path)] == path]:  # set anew by this file
                del changed[earlier]
            if path and not _same(was, value):
                changed[path] = (was, value)
    return changed


def command_line_values(config_args: Iterable[str]) -> dict:
    """``--config KEY=VALUE ...`` as typed: a VALUE that YAML's BaseLoader reads as a mapping or a list is that
    (every value inside it a string, as Snakemake has it), any other the string typed (unquoted by YAML); an empty
    one None, as Snakemake takes it."""
    values: dict = {}
    for entry in config_args:
        key, _, text = entry.partition("=")
        if not text:
            _merge(values, {key: None})
            continue
        try:
            value = yaml.load(text, Loader=yaml.BaseLoader)  # noqa: S506 (no object construction)
        except yaml.YAMLError:
            value = text
        _merge(values, {key: value if isinstance(value, dict | list | str) else text})  # a key given twice: merged
    return values


def _paths(values: Any, path: Path_ = ()) -> Iterable[Path_]:
    """The paths ``values`` sets when merged into a config (an empty mapping sets none)."""
    if isinstance(values, Mapping):
        for key, value in values.items():
            yield from _paths(value, (*path, key))
    else:
        yield path


def _merge(config: dict, values: Mapping) -> None:
    """``values`` merged into ``config`` mapping by mapping, as Snakemake's update_config does."""
    for key, value in values.items():
        if isinstance(value, Mapping) and isinstance(config.get(key), dict):
            _merge(config[key], value)
        else:
            config[key] = copy.deepcopy(value)


def entered_config(config: Mapping, files: Iterable[str | Path], config_args: Iterable[str] | None) -> dict:
    """The config Snakemake read (``config``: its ``files``, in the order it merged them, then ``config_args``,
    the ``--config`` words) as the user typed it, validated with its defaults and its settings parsed, as the
    module's docstring says; ClipflowError naming the setting."""
    config = copy.deepcopy(dict(config))
    given = command_line_values(config_args or [])
    on_command_line = set(_paths(given))
    texts = [Path(f).read_text(encoding="utf-8") for f in files if Path(f).is_file()]
    for path, (was, value) in file_values_as_typed(texts).items():
        if any(path[: len(p)] == p for p in on_command_line):
            continue  # --config set it after the file
        there, now = _get(config, path)
        if there and _same(now, was):
            _set(config, path, value)
    _merge(config, typed_command_line(given))
    config = validate(config, "config.schema.yaml", "config")
    slurm = config["cluster"]["slurm"]
    slurm["time_limit"] = time_limit_minutes(slurm["time_limit"])
    check_notice(config["cluster"], config["train"]["stop_grace"])
    return config
