"""The job of a training run: one frozen, typed object that every worker starts from.

``clipflow train launch`` turns its inputs (the cluster plan, the recipe with its overrides, the back end and
its parameter-server settings, the paths, the seed) into a :class:`TrainJob`, checked once
(:meth:`TrainJob.from_dict`: the job schema, the recipe's checks, the back end's), and writes it as
``job.json`` beside the run's checkpoints. A worker's command line is that file and its rank
(``clipflow train worker --job FILE --rank R``); it reads the job through the same check and re-parses
nothing else. ``clipflow train launch --job FILE`` starts a run from such a file.

Defaults are not here: the schemas own them (config.schema.yaml for the back end's settings, which the
command line takes as its defaults; recipe.schema.yaml for the recipe). A job file names every key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from clipflow.errors import ClipflowError
from clipflow.hosts.plan import Plan
from clipflow.made import Made
from clipflow.recipe import check_recipe
from clipflow.schemas import read_checked_json, validate
from clipflow.train.multigrid import MultigridPlan, check_multigrid

JOB_FILE = "job.json"
VERSION = 1


@dataclass(frozen=True)
class PSSettings:
    """How workers use the parameter server (launch settings, not part of a recipe)."""

    mode: str = "dist_sync"
    update_on_kvstore: bool = False  # True: servers run the optimizer; False: they sum, workers update
    compression: str = "none"  # or "2bit"
    threshold: float = 0.5

    def check_for(self, backend: str) -> None:
        """These are parameter-server settings: with ``ddp`` (the job schema knows the back ends) only the
        synchronous defaults make sense."""
        if backend == "ps":
            if self.mode.endswith("_device") and self.compression != "none":
                raise ClipflowError(
                    f"--compression {self.compression} cannot be combined with --kvstore {self.mode} (per-host "
                    f"aggregation); use --kvstore {self.mode.removesuffix('_device')} or --compression none"
                )
            return
        if self.mode != "dist_sync":
            raise ClipflowError(
                f"kvstore {self.mode} is a parameter-server mode; the ddp back end is synchronous "
                "(use --kvstore dist_sync, or --backend ps)"
            )
        if self.update_on_kvstore or self.compression != "none":
            setting = "--update-on-kvstore" if self.update_on_kvstore else f"--compression {self.compression}"
            raise ClipflowError(f"{setting} needs the parameter server; drop it or use --backend ps")


@dataclass(frozen=True)
class RunPolicy:
    """How a run goes on across failures, resizes and notices (config.yaml's train section; defaults there)."""

    resume: str = "auto"  # auto: from the newest checkpoint, or refused naming what makes it invalid; never: afresh
    global_batch: str = "scale"  # another worker count on resume: keep the global batch (accumulate) or scale lr
    max_restarts: int = 0  # relaunches after a failure, from the newest checkpoint
    min_workers: int | None = None  # a restart goes on while this many workers remain (None: all of them)
    stop_grace: float = 60.0  # seconds to finish the step and checkpoint after SIGTERM/SIGUSR1 to the launcher

    def fewest_workers(self, num_workers: int) -> int:
        """The fewest workers a restart may go on with."""
        return num_workers if self.min_workers is None else self.min_workers


@dataclass(frozen=True)
class TrainPaths:
    """Where a run reads and writes, absolute (as every host of the plan names them)."""

    splits_dir: Path  # worker{rank}.lst files
    root: Path  # the lists' paths are relative to it
    checkpoint_root: Path
    model_out: Path
    metrics_out: Path
    val_list: Path | None = None  # validation during training (train.eval_every) when given
    tensorboard: Path | None = None  # rank 0's TensorBoard event files go here when given
    train_list: Path | None = None  # the list the worker lists were split from (resume checks, resize re-splits)

    def shard(self, rank: int) -> Path:
        """Worker ``rank``'s list."""
        return self.splits_dir / f"worker{rank}.lst"

    def to_dict(self) -> dict[str, str | None]:
        return {name: None if value is None else str(value) for name, value in vars(self).items()}

    def expanded(self) -> TrainPaths:
        """The paths with a leading ``~`` made this host's home (a job for hosts with their own disks names its
        folder there so: :func:`clipflow.train.host_run.host_paths`)."""
        return TrainPaths(**{name: None if value is None else value.expanduser() for name, value in vars(self).items()})

    def on_host(self, folder: str, root: str) -> TrainPaths:
        """Where the run reads and writes on a host with its own disk: everything under the run's ``folder`` there
        (``<cluster.job_dir>/<run>``), the videos in the staged data ``root``."""

        def under(*parts: str) -> Path:
            return Path(folder, *parts)

        return TrainPaths(splits_dir=under("splits"), root=Path(root), checkpoint_root=under("checkpoints"),
                          model_out=under("train", "model_final.pt"), metrics_out=under("train", "metrics.jsonl"),
                          val_list=under("val.lst") if self.val_list else None,
                          tensorboard=under("tensorboard") if self.tensorboard else None,
                          train_list=under("train.lst") if self.train_list else None)  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, str | None]) -> TrainPaths:
        return cls(**{name: None if value is None else Path(value) for name, value in data.items()})


@dataclass(frozen=True)
class TrainJob:
    """One run's training job. ``recipe`` is the validated recipe (overrides applied, defaults filled); treat it
    as read-only, like the rest."""

    plan: Plan
    recipe: dict[str, Any]
    backend: str
    ps: PSSettings
    paths: TrainPaths
    seed: int
    policy: RunPolicy = RunPolicy()

    @cached_property
    def multigrid(self) -> MultigridPlan | None:
        """The recipe's multigrid plan (clipflow.train.multigrid), None without it; checked when the job is made."""
        return check_multigrid(self.recipe)

    @property
    def file(self) -> Path:
        """Where the job is written: beside the run's checkpoints."""
        return self.paths.checkpoint_root / JOB_FILE

    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.plan.num_workers:
            raise ClipflowError(
                f"worker rank {rank} is not in the job's plan: its ranks are 0..{self.plan.num_workers - 1}"
            )

    def to_dict(self) -> dict:
        return {
            "version": VERSION,
            "plan": self.plan.to_dict(),
            "recipe": self.recipe,
            "backend": self.backend,
            "ps": asdict(self.ps),
            "paths": self.paths.to_dict(),
            "seed": self.seed,
            "policy": asdict(self.policy),
        }

    @classmethod
    def create(cls, plan: Plan, recipe: dict, backend: str, ps: dict, paths: dict[str, str | None], seed: int,
               what: str = "job", policy: dict | None = None) -> TrainJob:  # fmt: skip
        """The job of these inputs, checked as a job file is (:meth:`from_dict`); ``paths`` (TrainPaths' fields,
        None for an optional one not given) are made absolute: every host of the plan names them so."""
        absolute = {name: None if path is None else str(Path(path).absolute()) for name, path in paths.items()}
        return cls.from_dict({"version": VERSION, "plan": plan.to_dict(), "recipe": recipe, "backend": backend,
                              "ps": ps, "paths": absolute, "seed": seed,
                              "policy": asdict(RunPolicy(**(policy or {})))}, what)  # fmt: skip

    @classmethod
    def from_dict(cls, data: object, what: str = "job") -> TrainJob:
        """The job of :meth:`to_dict`'s form, checked: the job schema (every key, its type), the plan's roles against
        its counts and hosts (:meth:`Plan.check`), the recipe's checks, the back end's settings. Every problem is
        named with ``what``."""
        data = validate(data, "job.schema.yaml", what)
        return cls._checked(data, what)

    @classmethod
    def _checked(cls, data: dict, what: str) -> TrainJob:
        plan = Plan.from_dict(data["plan"])
        try:
            plan.check()
        except ClipflowError as exc:
            raise ClipflowError(f"{what}: {exc}") from None
        ps = PSSettings(**data["ps"])
        policy = RunPolicy(**data["policy"])
        workers = data["plan"]["num_workers"]
        if policy.min_workers is not None and policy.min_workers > workers:
            raise ClipflowError(
                f"{what}: min_workers {policy.min_workers} is more than the plan's {workers} workers; "
                f"give at most {workers} (train.min_workers, --min-workers)"
            )
        try:
            ps.check_for(data["backend"])
        except ClipflowError as exc:
            raise ClipflowError(f"{what}: {exc}") from None
        job = cls(
            plan=plan,
            recipe=check_recipe(data["recipe"], f"{what}: recipe"),
            backend=data["backend"],
            ps=ps,
            paths=TrainPaths.from_dict(data["paths"]),
            seed=data["seed"],
            policy=policy,
        )
        try:
            job.multigrid  # noqa: B018 (derived once, here: the trainer reads it)
        except ClipflowError as exc:
            raise ClipflowError(f"{what}: recipe: {exc}") from None
        return job

    def write(self, into: Made | None = None) -> Path:
        """Writes the job to :attr:`file` (atomically, recorded as clipflow's: :meth:`made`), or as job.json to the
        folder of ``into`` (the job the hosts run, kept beside the run's checkpoints here); returns that path."""
        return (into or self.made()).write_text(JOB_FILE, json.dumps(self.to_dict(), indent=2) + "\n")

    def made(self) -> Made:
        """The record of the checkpoint root, where the job file goes: its :meth:`Made.check` refuses a job.json
        there that clipflow did not write."""
        return Made(self.paths.checkpoint_root, "--checkpoint-root")

    @classmethod
    def read(cls, path: str | Path) -> TrainJob:
        fix = "`clipflow train launch` writes a good one (or rerun the train stage)"
        data = read_checked_json(path, "job.schema.yaml", "job file", fix)
        try:
            return cls._checked(data, f"job file {path}")
        except ClipflowError as exc:
            raise ClipflowError(f"{exc}; {fix}") from None
