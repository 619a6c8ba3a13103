"""YAML read with numbers as YAML 1.2 writes them, wherever clipflow reads YAML (config, recipes, schemas).

PyYAML follows YAML 1.1, which reads ``12:00:00`` as a number in base 60 (43200), ``0x2000`` as 8192, ``1_0`` as
10, ``010`` as 8, ``0b11`` as 3 and ``2024-05-01`` as a date, while leaving ``1e-3`` a string: a setting then
silently holds another value than the one typed. :class:`Loader` reads plain scalars by YAML 1.2's core schema
instead: an integer is decimal digits with an optional sign (``010`` is 10), a float is decimal with an optional
fraction and exponent (``1e-3`` too) or ``.inf`` / ``.nan``; anything else stays the string it was typed as, for
its setting's schema to take or refuse by name. YAML 1.2 also reads ``0x``/``0o`` numbers; clipflow does not, on
purpose: no setting is a bit pattern, so ``num_workers: 0x2000`` is far more likely a slip than 8192, and it is
refused, naming the setting, rather than guessed. Booleans and null are read as PyYAML reads them (``yes`` and
``no`` included), as Snakemake does.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

INT = re.compile(r"[-+]?[0-9]+\Z")
FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z|[-+]?\.(inf|Inf|INF)\Z|\.(nan|NaN|NAN)\Z")
_DROPPED = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}


class Loader(yaml.SafeLoader):
    """PyYAML's SafeLoader with YAML 1.2's integers and floats (module docstring); no timestamps."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver("tag:yaml.org,2002:int", INT, list("-+0123456789"))
Loader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT, list("-+.0123456789"))


def _int(loader: Loader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if not INT.match(text):
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a decimal integer", node.start_mark)
    return int(text, 10)


def _float(loader: Loader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node)
    if not FLOAT.match(text):
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a decimal number", node.start_mark)
    lowered = text.lower()
    if lowered.endswith((".inf", ".nan")):
        return float(lowered.replace(".", ""))  # "-.inf" -> "-inf", ".nan" -> "nan"
    return float(text)


Loader.add_constructor("tag:yaml.org,2002:int", _int)
Loader.add_constructor("tag:yaml.org,2002:float", _float)


def load(text: str) -> Any:
    """``text`` as YAML with YAML 1.2's numbers; yaml.YAMLError when it is not YAML."""
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader)
