"""`clipflow train launch|worker`: a run's training job made and launched, and one worker of it."""

from __future__ import annotations

import argparse
from pathlib import Path

from clipflow.cli.args import at_least_zero, json_object, launched, positive, whole
from clipflow.errors import ClipflowError
from clipflow.schemas import config_defaults, config_enum, policy_names

JOB_INPUTS = ("plan", "recipe", "splits_dir", "root", "checkpoint_root", "model_out", "metrics_out")
PATHS = ("splits_dir", "root", "checkpoint_root", "model_out", "metrics_out", "val_list", "tensorboard", "train_list")
POLICY = policy_names()  # job.schema.yaml's
SETTINGS = (
    "overrides",
    "val_list",
    "tensorboard",
    "backend",
    "kvstore",
    "update_on_kvstore",
    "compression",
    "compression_threshold",
    "seed",
    "train_list",
    *POLICY,
)  # flags that make a job, unset unless typed (their defaults: below)


def flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def typed(value) -> bool:
    """Whether a flag of :data:`SETTINGS` or :data:`JOB_INPUTS` was given (unset ones are None, "" or False)."""
    return value is not None and value != "" and value is not False


def setting(a: argparse.Namespace, name: str, default):
    """A back-end setting as typed, else its default (config.schema.yaml's)."""
    value = getattr(a, name)
    return default if value is None else value


def job_from_args(a: argparse.Namespace):
    """The flags of `train launch` as a TrainJob (checked as it is made): a job file (--job), or the plan, the
    recipe and its overrides, the back end's settings, the paths and the seed."""
    from clipflow.hosts.plan import Plan
    from clipflow.recipe import fit_to_index, fit_to_videos, load_recipe
    from clipflow.train.init_from import check_init_from
    from clipflow.train.job import TrainJob

    if a.job:
        given = [flag(name) for name in (*JOB_INPUTS, *SETTINGS) if typed(getattr(a, name))]
        if given:
            raise ClipflowError(f"--job names the whole job: drop {', '.join(given)}, or drop --job")
        return TrainJob.read(a.job)
    missing = [flag(name) for name in JOB_INPUTS if not getattr(a, name)]
    if missing:
        raise ClipflowError(f"clipflow train launch needs {', '.join(missing)} (or --job FILE)")
    train = config_defaults("train")
    compression = train["gradient_compression"]
    paths = {name: getattr(a, name) or None for name in PATHS}
    ps = {"mode": setting(a, "kvstore", train["kvstore"]), "update_on_kvstore": a.update_on_kvstore,
          "compression": setting(a, "compression", compression["type"]),
          "threshold": setting(a, "compression_threshold", compression["threshold"])}  # fmt: skip
    policy = {name: setting(a, name, train[name]) for name in POLICY}
    recipe = load_recipe(a.recipe, json_object(a.overrides or "{}"))
    recipe = fit_to_videos(fit_to_index(recipe, a.train_list, f"recipe {a.recipe}"), a.root, f"recipe {a.recipe}")
    check_init_from(recipe)  # read again by rank 0 when the run has no checkpoint
    plan = Plan.read(a.plan, launching=True)
    return TrainJob.create(plan, recipe, setting(a, "backend", train["backend"]), ps, paths,
                           setting(a, "seed", train["seed"]), "train launch", policy)  # fmt: skip


def cmd_launch(a: argparse.Namespace) -> int:
    from clipflow.cluster.prediction import format_prediction, prediction_of
    from clipflow.errors import RESUMABLE
    from clipflow.launch.start import HostRun
    from clipflow.train.checkpoint import resumable_from
    from clipflow.train.launch import launch_training

    source = Path(a.job) if a.job else None
    local = HostRun.of(a.staged, a.host_dir)
    on_notice = a.on_notice or config_defaults("train")["on_notice"]
    if a.plan:  # the link check's prediction (checks.json beside the plan, ssh launcher), before any role starts
        prediction = prediction_of(Path(a.plan).parent / "checks.json")
        if prediction:
            print(f"clipflow train: {format_prediction(prediction)}", flush=True)
    job = job_from_args(a)
    code = launch_training(job, a.log_dir, a.grace, on_notice, source, local, a.slurm_notice)
    if code == RESUMABLE or not code:  # RESUMABLE: the launcher said where it stopped and that a rerun goes on
        return code
    if local is not None:  # the checkpoints are on the hosts' own disks, not here
        return launched(code, "training", "a rerun resumes from rank 0's newest checkpoint on its host, if it has one")
    return launched(code, "training", resumable_from(job.paths.checkpoint_root))


def cmd_worker(a: argparse.Namespace) -> int:
    from clipflow.train.worker import run_worker

    return run_worker(a.job, a.rank)


def register(sub: argparse._SubParsersAction) -> None:
    defaults = config_defaults("train")
    train = sub.add_parser("train", help="training").add_subparsers(dest="action", required=True)
    p = train.add_parser(
        "launch",
        help="start scheduler, servers and workers of a plan",
        description="Makes the run's job (plan, recipe with overrides, back end, paths, seed), checks it, writes it "
        "as job.json in --checkpoint-root and starts every worker with that file and its rank. --job FILE "
        "launches an existing job file instead.",
    )
    p.add_argument("--job", default="", help="a job.json to launch (instead of the flags that make one)")
    p.add_argument("--plan", default="", help="the cluster plan (clipflow cluster plan)")
    p.add_argument("--log-dir", required=True)
    p.add_argument("--grace", type=at_least_zero, default=10.0, help="seconds between SIGTERM and SIGKILL at teardown")
    p.add_argument("--recipe", default="", help="a recipe name (recipes/NAME.yaml) or file")
    p.add_argument("--overrides", default=None, help="recipe overrides as JSON, deep-merged (default: none)")
    p.add_argument("--splits-dir", default="", help="worker{rank}.lst, one list a worker")
    p.add_argument("--root", default="", help="folder the list paths are relative to")
    p.add_argument("--checkpoint-root", default="")
    p.add_argument("--model-out", default="")
    p.add_argument("--metrics-out", default="")
    p.add_argument("--val-list", default="", help="scanned val list: validation while training (train.eval_every)")
    p.add_argument("--tensorboard", default="", help="folder for rank 0's TensorBoard event files (default: none)")
    compression = defaults["gradient_compression"]
    p.add_argument("--backend", choices=config_enum("train", "backend"),
                   help="ps: clipflow's parameter server; ddp: torch.distributed "
                   f"(gloo or NCCL) (default: {defaults['backend']})")  # fmt: skip
    p.add_argument("--kvstore", help=f"the parameter server's mode (default: {defaults['kvstore']})")
    p.add_argument("--update-on-kvstore", action="store_true", help="the servers run the optimizer")
    p.add_argument("--compression", choices=config_enum("train", "gradient_compression", "type"),
                   help=f"gradient compression (default: {compression['type']})")  # fmt: skip
    p.add_argument("--compression-threshold", type=positive, help=f"default: {compression['threshold']}")
    p.add_argument("--seed", type=int, help=f"default: {defaults['seed']}")
    p.add_argument("--train-list", default="", help="the list the worker lists were split from: a resumed run "
                   "checks its content, a resize re-splits it (default: none)")  # fmt: skip
    p.add_argument(
        "--resume",
        choices=config_enum("train", "resume"),
        help="auto: from the newest checkpoint whatever changed, "
        f"or refused naming why; never: afresh, the old checkpoints moved aside (default: {defaults['resume']})",
    )
    p.add_argument(
        "--global-batch",
        choices=config_enum("train", "global_batch"),
        help="another worker count on resume: keep the "
        f"global batch (accumulate) or scale the learning rate (default: {defaults['global_batch']})",
    )
    p.add_argument(
        "--max-restarts", type=whole(0), help=f"relaunches after a failure (default: {defaults['max_restarts']})"
    )
    p.add_argument("--min-workers", type=whole(1), help="a restart goes on while this many workers remain "
                   "(default: all of them)")  # fmt: skip
    p.add_argument("--stop-grace", type=positive, help="seconds to finish the step and checkpoint after SIGTERM or "
                   f"SIGUSR1 (default: {defaults['stop_grace']})")  # fmt: skip
    p.add_argument("--on-notice", choices=config_enum("train", "on_notice"),
                   help="after a stop on notice inside a Slurm batch "
                   "job: requeue it (scontrol requeue) so that its next allocation resumes, or only exit 79 "
                   f"(default: {defaults['on_notice']})")  # fmt: skip
    p.add_argument("--slurm-notice", type=at_least_zero, default=0.0, help="inside a Slurm job with a time limit: "
                   "give the workers the notice this many seconds before its end, as SIGUSR1 would (Slurm's "
                   "--signal comes up to 30 s late, and not again after a requeue); 0: off")  # fmt: skip
    p.add_argument("--staged", default="", help="the staging stage's staged.json: with storage local the hosts "
                   "read the staged videos and keep the run's files in --host-dir")  # fmt: skip
    p.add_argument("--host-dir", default="", help="storage local: the run's folder on the hosts (~/: home)")
    p.set_defaults(func=cmd_launch)
    p = train.add_parser("worker", help="one worker of a job (started by the launcher with its job file and rank)")
    p.add_argument("--job", required=True, help="the run's job.json")
    p.add_argument("--rank", type=whole(0), required=True, help="this worker's rank")
    p.set_defaults(func=cmd_worker)
