"""The plan's expected step time and scaling efficiency for each back end, from the measured links.

Inputs: the link check's pairs (each host's slowest link bounds what it sends, and the slowest host bounds the
step: every worker waits for the last gradient), the model's gradient bytes (its trainable parameters x 4, float32,
built from the recipe as training builds it), a worker's compute time for one step (a forward and backward pass at
the per-worker batch, timed on the launching node on random clips of the recipe's shape, or given), and the
plan's shape (hosts, workers per host, whether ranks are grouped by host). The model itself is
:mod:`clipflow.cluster.step_prediction`'s. The clips' shape is GluonCV's sampling with one segment (the fast
pathway every ``fast_temporal_stride``-th frame of ``new_length``, the slow one every ``slow_temporal_stride``-th),
an approximation where a recipe samples otherwise; the timing is the launching node's, which is the figure the
prediction is only as good as when the hosts differ from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clipflow.cluster.links import slowest_by_host
from clipflow.cluster.step_prediction import BACKENDS, PlanShape, predict_step
from clipflow.hosts.plan import Plan
from clipflow.models.step_timing import gradient_bytes, time_step
from clipflow.textfile import read_json_object


def plan_shape(plan: Plan) -> PlanShape:
    """Hosts that run workers, the most workers one of them runs, and whether each host's ranks are contiguous."""
    by_host = {h: plan.worker_ranks(h) for h in plan.role_hosts()}
    by_host = {h: ranks for h, ranks in by_host.items() if ranks}
    grouped = all(max(r) - min(r) + 1 == len(r) for r in by_host.values())
    return PlanShape(len(by_host), max(len(r) for r in by_host.values()), grouped)


def shape_overrides(overrides: dict) -> dict:
    """What the prediction reads of a run's overrides: the model, the clips and the per-worker batch. The
    cluster check gets only these, so a changed epoch count or learning rate does not rerun it (Snakemake reruns
    a rule whose parameters changed) and, after it, the staging and the training it feeds."""
    kept = {k: overrides[k] for k in ("model", "data") if k in overrides}
    train = overrides.get("train")
    if isinstance(train, dict) and "batch_size" in train:
        kept["train"] = {"batch_size": train["batch_size"]}
    return kept


def selected_backend(backend: str, kvstore: str) -> str:
    """The prediction's name for what the run uses: ddp, ps, or ps-host (the ``_device`` modes)."""
    if backend == "ddp":
        return "ddp"
    return "ps-host" if kvstore.endswith("_device") else "ps"


def predict_plan(plan: Plan, pairs: list[dict], grad_bytes: int, compute_s: float, uses: str) -> dict:
    """The prediction as checks.json keeps it: the inputs and, per back end, step time, exchange, bytes per host
    and efficiency; ``uses`` the back end the run will use."""
    return predict_shape(plan_shape(plan), pairs, grad_bytes, compute_s, uses)


def predict_shape(shape: PlanShape, pairs: list[dict], grad_bytes: int, compute_s: float, uses: str) -> dict:
    """:func:`predict_plan` for a plan's shape alone (``bench/cluster_scaling.py`` has hosts but no plan):
    the slowest host's slowest link and highest latency among ``pairs`` (at least one)."""
    worst = slowest_by_host(pairs)
    gbit_s = min(w["gbit_s"] for w in worst.values())
    latency_ms = max(w["latency_ms"] for w in worst.values())
    backends = {}
    for name in BACKENDS:
        step = predict_step(name, shape, grad_bytes, compute_s, gbit_s, latency_ms)
        backends[name] = {"step_s": step.step_s, "exchange_s": step.exchange_s,
                          "bytes_per_host": step.bytes_per_host, "efficiency": step.efficiency}  # fmt: skip
    return {"grad_bytes": grad_bytes, "compute_s": compute_s, "gbit_s": gbit_s, "latency_ms": latency_ms,
            "hosts": shape.hosts, "workers_per_host": shape.workers_per_host, "grouped": shape.grouped,
            "uses": uses, "backends": backends}  # fmt: skip


@dataclass(frozen=True)
class PredictionInputs:
    """What the link check needs to predict: the validated recipe, the back end the run uses (ddp, ps or ps-host)
    and a worker's step compute time (None: timed here, within ``bound_s``)."""

    recipe: dict
    uses: str
    compute_s: float | None = None
    bound_s: float = 30.0

    def predict(self, plan: Plan, pairs: list[dict]) -> dict:
        compute = self.compute_s if self.compute_s is not None else time_step(self.recipe, self.bound_s)
        prediction = predict_plan(plan, pairs, gradient_bytes(self.recipe), compute, self.uses)
        prediction["compute_measured"] = self.compute_s is None
        return prediction


def format_prediction(prediction: dict) -> str:
    p = prediction
    lines = [f"predicted step ({p['hosts']} hosts x {p['workers_per_host']} workers, gradient "
             f"{p['grad_bytes'] / 1e6:.1f} MB, compute {p['compute_s']:.3g} s, slowest link {p['gbit_s']:.3g} Gbit/s "
             f"{p['latency_ms']:.3g} ms):"]  # fmt: skip
    for name, b in p["backends"].items():
        mark = "  <- this run" if name == p["uses"] else ""
        lines.append(f"  {name:7} {b['step_s']:.3g} s a step (exchange {b['exchange_s']:.3g} s, "
                     f"{b['bytes_per_host'] / 1e6:.1f} MB a host), efficiency {b['efficiency']:.2f}{mark}")  # fmt: skip
    return "\n".join(lines)


def prediction_of(checks_file: str | Path) -> dict | None:
    """checks.json's prediction, when the file and the prediction are there (the ssh launcher's link check)."""
    path = Path(checks_file)
    if not path.is_file():
        return None
    checks = read_json_object(path, "host checks", "the JSON object clipflow cluster check writes (checks.json)")
    return (checks.get("links") or {}).get("prediction")
