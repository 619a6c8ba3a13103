"""`clipflow models list|info|import`: the model names and their sizes, and published weights made clipflow's."""

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
    if a.action == "import":
        return cmd_import(a)
    if a.name is None:
        raise ClipflowError("models info needs a model name; `clipflow models list` lists them")
    print(json.dumps(model_info(a.name, a.num_classes)))
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    from clipflow.files import check_output_file
    from clipflow.models.imports.importer import import_weights

    missing = [flag for flag, value in (("FILE", a.name), ("--from", a.source), ("--model", a.model),
                                        ("--out", a.out)) if not value]  # fmt: skip
    if missing:
        raise ClipflowError(f"models import needs {', '.join(missing)}: clipflow models import FILE --from "
                            "gluoncv|pyslowfast|pytorchvideo --model NAME --out FILE")  # fmt: skip
    check_output_file(a.out, "--out", "weights.pt")
    done = import_weights(a.name, a.source, a.model, a.out)
    print(f"{a.out}: {a.model}, {done.num_classes} classes, {len(done.state)} tensors from {a.source} {a.name}")
    for name, shape in done.skipped.items():
        print(f"skipped {name} {shape}: no place in clipflow's {a.model}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="model names and sizes; import published weights")
    p.add_argument("action", choices=["list", "info", "import"])
    p.add_argument("name", nargs="?", help="a name from `models list` (info); the reference's checkpoint (import)")
    p.add_argument("--num-classes", type=count, default=400)
    p.add_argument("--from", dest="source", help="import: the reference that wrote FILE (gluoncv, pyslowfast, "
                   "pytorchvideo)")  # fmt: skip
    p.add_argument("--model", help="import: the clipflow model FILE holds (e.g. slowfast_4x16_resnet50)")
    p.add_argument("--out", help="import: the clipflow weights file to write")
    p.set_defaults(func=cmd_models)
