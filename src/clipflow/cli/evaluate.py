"""`clipflow evaluate [launch|worker]`: the recipe's test protocol on a list, in one process or over a plan."""

from __future__ import annotations

import argparse

from clipflow.cli.args import at_least_zero, count, launched, whole
from clipflow.errors import ClipflowError


def _need(a: argparse.Namespace) -> None:
    """--model, --list, --root and --out are required by the forms that take them."""
    missing = [f"--{name}" for name in ("model", "list", "root", "out") if not getattr(a, name)]
    if missing:
        raise ClipflowError(f"clipflow evaluate needs {', '.join(missing)}")


def _weights(a: argparse.Namespace) -> dict | None:
    """--weights FILE --recipe R: the recipe (with --overrides) whose test protocol scores FILE, as --model."""
    from clipflow.cli.args import json_object
    from clipflow.recipe import load_recipe

    if not a.weights:
        if a.recipe or a.overrides:
            raise ClipflowError("--recipe and --overrides go with --weights (a model file carries its own recipe)")
        return None
    if a.model:
        raise ClipflowError("give --model (a model file of a run) or --weights (with --recipe), not both")
    if not a.recipe:
        raise ClipflowError(f"--weights {a.weights} needs --recipe: the recipe whose test protocol scores it")
    a.model = a.weights
    return load_recipe(a.recipe, json_object(a.overrides or "{}"))


def cmd_evaluate(a: argparse.Namespace) -> int:
    """One process, no plan: the same scoring as `evaluate launch` with one worker."""
    from clipflow.evaluate.evaluate import evaluate
    from clipflow.evaluate.metrics import summary_line
    from clipflow.train.device import worker_device

    recipe = _weights(a)
    _need(a)
    print(summary_line(evaluate(a.model, a.list, a.root, a.out, a.batch_size, device=worker_device(),
                                recipe=recipe)))  # fmt: skip
    return 0


def cmd_launch(a: argparse.Namespace) -> int:
    from clipflow.evaluate.launch import launch_evaluation
    from clipflow.launch.start import HostRun

    _need(a)
    local = HostRun.of(a.staged, a.host_dir)
    code = launch_evaluation(a.plan, a.model, a.list, a.root, a.out, a.batch_size, a.log_dir, a.grace, local)
    return launched(code, "evaluation", f"see the workers' logs in {a.log_dir}")


def cmd_worker(a: argparse.Namespace) -> int:
    from clipflow.evaluate.worker import run_eval_worker

    return run_eval_worker(a.job, a.rank)


def _inputs(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--model", required=required, help="a model file of the train stage (model_final.pt)")
    p.add_argument("--list", required=required, help="the scanned list to score (val.lst)")
    p.add_argument("--root", required=required, help="folder the list's paths are relative to")
    p.add_argument("--out", required=required, help="metrics.json to write")
    p.add_argument(
        "--batch-size",
        type=count,
        default=None,
        help="views a forward pass at most; a batch holds whole videos (default: the recipe's eval_batch_size)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        help="top-1/top-5 of a trained model on a list with the recipe's test protocol",
        description="Scores every view of the recipe's test protocol (data.test_clips x data.test_crops for videos, "
        "one view for images) and writes metrics.json. Two forms: `clipflow evaluate --model M --list L --root R "
        "--out OUT` in this one process, or `clipflow evaluate launch --plan P --log-dir D --model M ...` on every "
        "worker of a cluster plan, the videos split over them and the results gathered with torch.distributed "
        "(whatever back end trained the model). `evaluate worker` is what the launcher starts.",
    )
    _inputs(evaluate, required=False)
    evaluate.add_argument("--weights", help="instead of --model: a weights file (`clipflow models import` made, or "
                          "any clipflow model file), scored with --recipe's test protocol")  # fmt: skip
    evaluate.add_argument("--recipe", help="with --weights: the recipe (name or file) whose test protocol to use")
    evaluate.add_argument("--overrides", help="with --weights: JSON merged into the recipe")
    evaluate.set_defaults(func=cmd_evaluate)
    forms = evaluate.add_subparsers(dest="action", required=False, metavar="{launch,worker}")
    p = forms.add_parser("launch", help="evaluate on every worker of a plan (torch.distributed), rank 0 writes --out")
    p.add_argument("--plan", required=True, help="the cluster plan (clipflow cluster plan); its workers run")
    p.add_argument("--log-dir", required=True, help="one log a worker, and the evaluation's job.json")
    p.add_argument("--grace", type=at_least_zero, default=10.0, help="seconds between SIGTERM and SIGKILL at teardown")
    _inputs(p, required=True)
    p.add_argument("--staged", default="", help="the staging stage's staged.json: with storage local the hosts "
                   "read the staged videos and the evaluation runs in --host-dir/evaluate")  # fmt: skip
    p.add_argument("--host-dir", default="", help="storage local: the run's folder on every host")
    p.set_defaults(func=cmd_launch)
    p = forms.add_parser("worker", help="one worker of an evaluation (started by `evaluate launch` with its job file "
                         "and rank)")  # fmt: skip
    p.add_argument("--job", required=True, help="the evaluation's job.json")
    p.add_argument("--rank", type=whole(0), required=True, help="this worker's rank")
    p.set_defaults(func=cmd_worker)
