"""`clipflow models list|info`: the model names and their sizes."""

from __future__ import annotations

import argparse
import json

from clipflow.cli.args import count
from clipflow.errors import ClipflowError


def cmd_models(a: argparse.Namespace) -> int:
    from clipflow.models.builder import model_info
    from clipflow.models.cards import MODEL_NAMES

    if a.action == "list":
        print("\n".join(MODEL_NAMES))
        return 0
    if a.name is None:
        raise ClipflowError("models info needs a model name; `clipflow models list` lists them")
    print(json.dumps(model_info(a.name, a.num_classes)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="model names and sizes")
    p.add_argument("action", choices=["list", "info"])
    p.add_argument("name", nargs="?", help="a name from `models list` (info)")
    p.add_argument("--num-classes", type=count, default=400)
    p.set_defaults(func=cmd_models)
