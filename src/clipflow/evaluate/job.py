"""The job of an evaluation over a plan's workers, as :mod:`clipflow.train.job` is training's.

``clipflow evaluate launch`` checks the inputs once (the model loads, the list's lines, labels and videos),
writes an :class:`EvalJob` as ``job.json`` in its log folder and starts every worker with that file and its
rank (``clipflow evaluate worker --job FILE --rank R``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.hosts.plan import Plan
from clipflow.made import Made
from clipflow.schemas import read_checked_json

JOB_FILE = "job.json"
VERSION = 1
PATHS = ("model", "list", "root", "out")


@dataclass(frozen=True)
class EvalJob:
    plan: Plan
    model: Path  # a model file of the train stage
    list: Path  # the scanned list to score
    root: Path  # the folder the list's paths are relative to
    out: Path  # metrics.json, written by rank 0
    batch_size: int | None  # views a forward pass at most; None: the recipe's eval_batch_size

    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.plan.num_workers:
            raise ClipflowError(
                f"worker rank {rank} is not in the evaluation's plan: its ranks are 0..{self.plan.num_workers - 1}"
            )

    def expanded(self) -> EvalJob:
        """The paths with a leading ``~`` made this host's home."""
        return EvalJob(self.plan, *(getattr(self, name).expanduser() for name in PATHS), self.batch_size)

    def on_host(self, folder: str, root: str) -> EvalJob:
        """The job as a host with its own disk runs it: the model, the list and metrics.json in the evaluation's
        ``folder`` there, the videos in the staged data ``root``."""
        return EvalJob(self.plan, Path(folder, "model.pt"), Path(folder, "val.lst"), Path(root),
                       Path(folder, "metrics.json"), self.batch_size)  # fmt: skip

    def to_dict(self) -> dict:
        paths = {name: str(getattr(self, name)) for name in PATHS}
        return {"version": VERSION, "plan": self.plan.to_dict(), **paths, "batch_size": self.batch_size}

    def write(self, folder: str | Path) -> Path:
        """Writes the job to ``folder``/job.json (atomically, recorded as clipflow's: :mod:`clipflow.made`);
        returns that path."""
        return Made(folder, "--log-dir").write_text(JOB_FILE, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> EvalJob:
        fix = "`clipflow evaluate launch` writes a good one (or rerun the evaluate stage)"
        data = read_checked_json(path, "eval_job.schema.yaml", "evaluation job file", fix)
        plan = Plan.from_dict(data["plan"])
        try:
            plan.check()
        except ClipflowError as exc:
            raise ClipflowError(f"evaluation job file {path}: {exc}; {fix}") from None
        return cls(plan, *(Path(data[name]) for name in PATHS), data["batch_size"])
