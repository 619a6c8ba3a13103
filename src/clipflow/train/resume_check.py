"""Whether a run may go on from its newest checkpoint with the new job's settings, and what changed.

Every checkpoint records the settings it was made with (``facts``: :func:`job_facts`). Before any role starts
(the launcher, when the run's checkpoint folder is on its disk) and again in rank 0 when it loads the checkpoint
(hosts with their own disks), :func:`check_resume` compares them with the new job's and sorts every changed
setting into one of three kinds:

=========  ==============================================================================  =======================
kind       settings                                                                        what happens
=========  ==============================================================================  =======================
resumes    ``train.epochs``, ``eval_every``, ``eval_batch_size``, ``save_frequency``,       printed as ``setting:
           ``save_every_iters``, ``keep_checkpoints``, ``loader_workers``,                 old -> new``, the run
           ``loader_prefetch``, the learning rate (``base_lr``, ``base_batch``,            goes on
           ``lr_mode``, ``lr_decay``, ``lr_decay_epoch``, ``warmup_*``), the optimizer's
           numbers (``momentum``, ``nesterov``, ``wd``, ``no_wd``, ``beta*``,
           ``epsilon``, ``clip_grad``), ``precision``, ``channels_last``, ``compile``,
           every ``data.*`` setting but ``data.kind`` (clip sampling and augmentation),
           the recipe's name, description and reference, ``train.seed``,
           ``train.tensorboard``, ``cluster.hosts``, ``cluster.placement``,
           ``train.backend`` and the parameter server's settings
resizes    ``cluster.num_workers``, ``train.batch_size``, ``train.accumulate`` (and so     printed, the run goes on
           the global batch)                                                               with the new sizes
refused    every ``model.*`` key (name, num_classes, width, depth, ...),                   one error naming each,
           ``train.optimizer``, ``train.multigrid`` (its epochs and steps are its          both values, the ways
           cycles'), ``data.kind``, the training list's content (its sha256)               out
=========  ==============================================================================  =======================

Where a change moves the learning rate at the resume point (a longer cosine schedule, another global batch), the
old and the new value at that step are printed too. Checkpoints that exist are never ignored: none that loads, or
an old-layout folder (checkpoints in a per-settings subfolder, as clipflow kept them before), is refused naming
them. With ``train.resume: never`` the earlier run's files are moved into ``set-aside-<UTC time>/`` beside them
(never deleted) and the run starts afresh.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clipflow.checksums import SUFFIX, sha256_of
from clipflow.data.listfile import VideoEntry
from clipflow.errors import ClipflowError
from clipflow.train.checkpoint import NAME, RUN_FILES, CheckpointStore, checkpoint_name
from clipflow.train.schedule import Schedule, scaled_lr

SET_ASIDE = "set-aside-"

RESIZES = ("cluster.num_workers", "train.batch_size", "train.accumulate", "global batch")
REFUSED_EXACT = ("train.optimizer", "train.multigrid", "data.kind", "training list (sha256)")
REFUSED_PREFIX = ("model.",)
WAYS_OUT = (
    "to start afresh with the old checkpoints set aside, set train.resume: never (--resume never); "
    "or give this run another name (config `run`)"
)


def kind_of(setting: str) -> str:
    """resumes, resizes or refused: what a change of ``setting`` (a name of :func:`flatten`) does to a resume."""
    if setting in REFUSED_EXACT or setting.startswith(REFUSED_PREFIX):
        return "refused"
    return "resizes" if setting in RESIZES else "resumes"


def train_list_digest(paths, num_workers: int) -> str | None:
    """The sha256 of the training list: of ``paths.train_list``'s bytes when given, else of the sorted distinct
    lines of all worker lists; None when the files are not all here (rank 0 on a host with its own disk holds
    only its own lists): then it is not compared."""
    if paths.train_list is not None:
        path = Path(paths.train_list).expanduser()
        return sha256_of(path) if path.is_file() else None
    lines: set[str] = set()
    for rank in range(num_workers):
        shard = Path(paths.shard(rank)).expanduser()
        if not shard.is_file():
            return None
        lines.update(line for line in shard.read_text(errors="replace").splitlines() if line.strip())
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


def listed_iterations(entries: list[VideoEntry], train: dict[str, Any]) -> int:
    """Steps an epoch as a worker list of ``entries`` gives them: its ``accumulate`` slot parts of whole batches."""
    return len(entries) // train["accumulate"] // train["batch_size"]


def job_facts(job, iters_per_epoch: int | None) -> dict[str, Any]:
    """The settings a checkpoint of ``job`` is made with (saved in it as ``facts``)."""
    t = job.recipe["train"]
    workers = job.plan.num_workers
    return {
        "recipe": job.recipe,
        "workers": workers,
        "batch_size": t["batch_size"],
        "accumulate": t["accumulate"],
        "global_batch": workers * t["batch_size"] * t["accumulate"],
        "iters_per_epoch": iters_per_epoch,
        "seed": job.seed,
        "backend": job.backend,
        "ps": asdict(job.ps) if job.backend == "ps" else None,
        "hosts": list(job.plan.hosts),
        "placement": job.plan.placement,
        "train_list_sha256": train_list_digest(job.paths, workers),
    }


def flatten(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` as settings by the names a user knows them (``model.width``, ``train.epochs``, ...); what a
    checkpoint made before facts were recorded lacks is left out, and so never compared."""
    settings: dict[str, Any] = {}
    recipe = facts.get("recipe") or {}
    for section, values in recipe.items():
        if isinstance(values, dict):
            for key, value in values.items():
                settings[f"{section}.{key}"] = value
        else:
            settings["recipe" if section == "name" else f"recipe.{section}"] = values
    names = {"workers": "cluster.num_workers", "global_batch": "global batch", "seed": "train.seed",
             "backend": "train.backend", "hosts": "cluster.hosts", "placement": "cluster.placement",
             "train_list_sha256": "training list (sha256)"}  # fmt: skip
    for key, name in names.items():
        if facts.get(key) is not None:
            settings[name] = facts[key]
    for key, value in (facts.get("ps") or {}).items():
        settings["train.kvstore" if key == "mode" else f"ps.{key}"] = value
    return settings


@dataclass
class Changes:
    """The settings that differ, each (name, old, new), by kind."""

    resumes: list[tuple[str, Any, Any]] = field(default_factory=list)
    resizes: list[tuple[str, Any, Any]] = field(default_factory=list)
    refused: list[tuple[str, Any, Any]] = field(default_factory=list)


def compare(old: dict[str, Any], new: dict[str, Any]) -> Changes:
    """What changed from the checkpoint's ``old`` facts to the new job's ``new``; a setting one side does not
    know (an older checkpoint, a list not here) is not compared."""
    before, after = flatten(old), flatten(new)
    changes = Changes()
    for name in sorted(before.keys() & after.keys()):
        if before[name] != after[name]:
            getattr(changes, kind_of(name)).append((name, before[name], after[name]))
    return changes


def _shown(value: Any) -> str:
    return value[:12] if isinstance(value, str) and len(value) == 64 else str(value)  # a sha256: its start


def _schedule(facts: dict[str, Any]) -> Schedule | None:
    t = (facts.get("recipe") or {}).get("train") or {}
    if facts.get("global_batch") is None or not facts.get("iters_per_epoch") or "base_lr" not in t:
        return None
    return Schedule(scaled_lr(t["base_lr"], t["base_batch"], facts["global_batch"]), t["epochs"],
                    facts["iters_per_epoch"], t["lr_mode"], t["warmup_epochs"], t["warmup_lr"], t["lr_decay"],
                    tuple(t["lr_decay_epoch"]))  # fmt: skip


def lr_at_resume(old: dict[str, Any], new: dict[str, Any], step: int) -> tuple[float, float] | None:
    """The learning rate of ``step`` (the first after the checkpoint) under the old and the new settings, when
    both are known; the new side takes the old iterations an epoch when it does not know its own."""
    new = new if new.get("iters_per_epoch") else {**new, "iters_per_epoch": old.get("iters_per_epoch")}
    schedules = _schedule(old), _schedule(new)
    if None in schedules:
        return None
    return schedules[0](step), schedules[1](step)


def refusal(path: Path, refused: list[tuple[str, Any, Any]]) -> ClipflowError:
    named = ", ".join(f"{name} {_shown(old)} -> {_shown(new)}" for name, old, new in refused)
    return ClipflowError(f"cannot resume from {path}: {named} make its weights invalid for this job; {WAYS_OUT}")


def old_layout(folder: Path) -> list[Path]:
    """Subfolders of the run's checkpoint folder that hold checkpoints: the per-settings folders clipflow kept
    before checkpoints went straight into the run's folder (set-aside folders are not)."""
    if not folder.is_dir():
        return []
    subfolders = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(SET_ASIDE)]
    return sorted(p for p in subfolders if any(NAME.match(q.name) for q in p.iterdir()))


def earlier_files(folder: Path) -> list[Path]:
    """The earlier run's files in ``folder``: its checkpoints (the store's, :mod:`clipflow.train.checkpoint`),
    best model, history and facts, with their sha256 files; never job.json, clipflow's own records, nor a file of
    someone else's with a checkpoint's name."""
    if not folder.is_dir():
        return []
    names = {p.name for p in folder.iterdir() if p.is_file()}
    run = {checkpoint_name(*point) for point in CheckpointStore(folder).points()}
    own = [n for n in names if n in run or n in RUN_FILES]
    return [folder / n for n in sorted(own + [n + SUFFIX for n in own if n + SUFFIX in names])]


def set_aside(folder: Path, log=print) -> Path | None:
    """The earlier run's files and old-layout folders moved into ``folder/set-aside-<UTC time>/``; its path, or
    None when there was nothing to move. Nothing is deleted."""
    old_folders = old_layout(folder)
    moving = [*earlier_files(folder), *old_folders]
    if not old_folders and not any(NAME.match(p.name) for p in moving):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target, n = folder / f"{SET_ASIDE}{stamp}", 1
    while target.exists():
        n += 1
        target = folder / f"{SET_ASIDE}{stamp}-{n}"
    target.mkdir()
    for path in moving:
        shutil.move(str(path), str(target / path.name))
    log(f"clipflow: train.resume never: the earlier run's {len(moving)} files set aside in {target}; starting afresh")
    return target


def check_resume(folder: Path, new: dict[str, Any], resume: str, log=print,
                 store: CheckpointStore | None = None) -> tuple[dict, Path] | None:  # fmt: skip
    """The one check before a run starts, in the launcher and in rank 0: the newest checkpoint in ``folder`` that
    loads, when the job (``new``: :func:`job_facts`) may go on from it (its changes printed), or None for a fresh
    start (no checkpoint; ``resume`` never: the earlier files set aside first). ClipflowError, one line, when
    checkpoints exist that cannot be used: an old-layout folder, none that loads, a refused change. ``store``: the
    folder's :class:`CheckpointStore` when the caller has one (what it says of others' files is said once)."""
    folder = Path(folder)
    if resume == "never":
        set_aside(folder, log)
        return None
    old_folders = old_layout(folder)
    if old_folders:
        raise ClipflowError(
            f"{old_folders[0]} holds checkpoints in the layout of an older clipflow (a folder per settings); move "
            f"its files up into {folder} to resume from them, or set train.resume: never (--resume never) to start "
            "afresh with them set aside"
        )
    found = (store or CheckpointStore(folder, log=log)).load_newest()
    if found is None:
        return None
    state, path = found
    old = state.get("facts") or {"recipe": state.get("recipe") or {}}
    changes = compare(old, new)
    if changes.refused:
        raise refusal(path, changes.refused)
    for name, before, after in changes.resumes:
        log(f"clipflow: resume from {path.name}: {name}: {_shown(before)} -> {_shown(after)}")
    for name, before, after in changes.resizes:
        log(f"clipflow: resume from {path.name}: {name}: {before} -> {after} (resize)")
    if changes.resumes or changes.resizes:
        step = int(state.get("step", 0))
        rates = lr_at_resume(old, new, step)
        if rates and rates[0] != rates[1]:
            log(f"clipflow: resume from {path.name}: learning rate at step {step} (the resume point): "
                f"{rates[0]:.6g} -> {rates[1]:.6g}")  # fmt: skip
    return found
