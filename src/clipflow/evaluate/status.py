"""Where a run stands: ``python -m clipflow status <run>``.

Reads what the trainer's rank 0 keeps beside the checkpoints in ``results/<run>/checkpoints/``: ``run.json``
(recipe, epochs, iterations an epoch, workers), ``metrics.jsonl`` (one line an epoch) and the
checkpoint files. Nothing is loaded with torch, so it answers at once for any model size. A file it
cannot read (not UTF-8, not JSON, JSON that is not an object, a record without its fields) is one
message naming the file and the line.

With the run on hosts with their own disks (``cluster.storage: local``), the job file the launcher wrote
there names a checkpoint root on rank 0's host: the same files are read from that host over SFTP (copied into a
temporary folder first; the checkpoints only listed).

Throughput is the last epoch's clips/s over all workers; the ETA is the epochs left times the
mean time of the last three epochs.

A run the launcher no longer trains has no ETA: its record of attempts (``restarts.jsonl``, written here when each
launch of the workers ends) says when its last attempt stopped and why (Ctrl-C, a failure, a notice), and nothing
of the run was written here after that (a later launch writes its job.json, the trainer its run.json, at once).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.jsonl import record_lines
from clipflow.textfile import read_json_object
from clipflow.train.checkpoint import RUN_FACTS, CheckpointStore

RECENT_EPOCHS = 3


@dataclass(frozen=True)
class RunStatus:
    run: str
    recipe: str
    epoch: int  # epochs complete
    epochs: int
    last_checkpoint: str | None  # file name, e.g. epoch_0004.pt or epoch_0005_iter_000120.pt
    clips_per_s: float | None  # the last epoch's, over all workers
    eta_s: float | None  # None until an epoch has a time
    best_val_top1: float | None
    finished: bool
    source: str = ""  # where the run's files were read: its folder here, or host:folder on rank 0's own disk
    stopped_at: float | None = None  # not finished and not training: when the launcher's last attempt ended
    stop_cause: str = ""  # and why, in the launcher's words with its exit status

    def lines(self) -> list[str]:
        rate = f"{self.clips_per_s:.1f} clips/s" if self.clips_per_s is not None else "no epoch finished yet"
        eta = "done" if self.finished else (_duration(self.eta_s) if self.eta_s is not None else "unknown")
        best = f"{self.best_val_top1:.4f}" if self.best_val_top1 is not None else "none yet"
        stopped = []
        if self.stopped_at is not None:
            eta = "none, not training"
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.stopped_at))
            point = f"from {self.last_checkpoint}" if self.last_checkpoint else "from the start (no checkpoint yet)"
            stopped = [f"stopped: at {when}, after epoch {self.epoch}/{self.epochs} ({self.stop_cause}); rerun the "
                       f"train stage to resume {point}"]  # fmt: skip
        return [
            f"run {self.run}: {self.recipe}",
            f"epoch {self.epoch}/{self.epochs}",
            f"last checkpoint: {self.last_checkpoint or 'none yet'}",
            *stopped,
            f"throughput: {rate}",
            f"ETA: {eta}",
            f"best val top-1: {best}",
            f"read from: {self.source}",
        ]

    def as_json(self) -> str:
        return json.dumps(asdict(self))


def run_status(results: str | Path, run: str) -> RunStatus:
    results = Path(results)
    folder = results / run
    if not folder.is_dir():
        known = sorted(p.name for p in results.iterdir() if (p / "checkpoints").is_dir()) if results.is_dir() else []
        raise ClipflowError(f"no run {run!r} in {results}/ (runs with checkpoints: {', '.join(known) or 'none'})")
    checkpoints = folder / "checkpoints"
    started = _started(checkpoints)  # first: a folder that may not be read is named
    on_host = _on_own_disks(checkpoints)
    stop = _stopped(checkpoints)
    if on_host is not None:
        with tempfile.TemporaryDirectory(prefix="clipflow-status-") as copy:
            latest, source = _copy_from_rank0(*on_host, Path(copy))
            return _status(run, latest, source, stop)
    if not started:
        raise ClipflowError(f"run {run!r} has not started training: no {checkpoints}/{RUN_FACTS}")
    return _status(run, checkpoints, str(checkpoints), stop)


def _stopped(checkpoints: Path) -> tuple[float, str] | None:
    """(when, why) the launcher's last attempt ended, when the run stopped with it: it did not succeed, and no
    file of the run here is newer (a later launch writes its job.json, its trainer run.json, when it starts);
    None while the run trains, after a success, or without the launcher's record (``restarts.jsonl``)."""
    from clipflow.train.restarts import RESTARTS_FILE, read_attempts

    record = checkpoints / RESTARTS_FILE
    if not record.is_file():
        return None
    attempts = read_attempts(record)
    last = attempts[-1] if attempts else {}
    ended, code = last.get("ended"), last.get("code")
    if not _is(ended, float) or not _is(code, int) or code == 0:
        return None
    newest = max((p.stat().st_mtime for p in checkpoints.iterdir()
                  if p.is_file() and not p.name.startswith(RESTARTS_FILE)), default=0.0)  # fmt: skip
    if newest > ended:
        return None
    cause = str(last["cause"]) or "stopped"
    return float(ended), f"{cause}, exit {code}"


def _status(run: str, latest: Path, source: str, stop: tuple[float, str] | None = None) -> RunStatus:
    """The status of the run whose newest checkpoint folder is (a copy of) ``latest``; ``stop``: when and why the
    launcher stopped it (:func:`_stopped`), if it is not training."""
    facts = _read_facts(latest / RUN_FACTS)
    history = _read_history(latest / "metrics.jsonl")
    store = CheckpointStore(latest)
    points = store.points()
    last = store.path(*points[-1]).name if points else None
    epoch = history[-1]["epoch"] if history else 0
    recent = [h["epoch_time"] for h in history[-RECENT_EPOCHS:]]
    finished = epoch >= facts["epochs"]
    stop = None if finished else stop
    eta = (facts["epochs"] - epoch) * sum(recent) / len(recent) if recent and stop is None else None
    best = latest / "best.json"
    return RunStatus(
        run=run,
        recipe=facts["recipe"],
        epoch=epoch,
        epochs=facts["epochs"],
        last_checkpoint=last,
        clips_per_s=history[-1]["clips_per_s"] if history else None,
        eta_s=eta,
        best_val_top1=_read_best(best) if best.is_file() else None,
        finished=finished,
        source=source,
        stopped_at=stop[0] if stop else None,
        stop_cause=stop[1] if stop else "",
    )


def _on_own_disks(checkpoints: Path):
    """With local storage, the run's job file here names a checkpoint root on the hosts' own disks: (the plan,
    that root); None when the run's checkpoints are here (shared storage, one machine) or no job was written."""
    from clipflow.hosts.plan import Plan
    from clipflow.train.job import JOB_FILE

    job = checkpoints / JOB_FILE
    if not job.is_file():
        return None
    data = read_json_object(job, "job file", "the JSON object `clipflow train launch` writes; rerun the train stage")
    root, plan = (data.get("paths") or {}).get("checkpoint_root"), data.get("plan")
    if not isinstance(root, str) or not isinstance(plan, dict) or plan.get("launcher") != "ssh":
        return None
    if Path(root).expanduser().absolute() == checkpoints.absolute():
        return None
    return Plan.from_dict(plan), root


def _copy_from_rank0(plan, root: str, into: Path) -> tuple[Path, str]:
    """The run's checkpoint folder ``root`` on the host of rank 0: its run facts, history, best record and record
    of clipflow's files copied into ``into``, its checkpoints listed (empty files of their names); (the copy,
    host:folder)."""
    from clipflow.hosts.files import open_host
    from clipflow.made import RECORD
    from clipflow.train.checkpoint import NAME

    host = plan.rank0_host()
    where = open_host(plan, host)
    try:
        latest = root
        if not where.exists(f"{root}/{RUN_FACTS}"):
            raise ClipflowError(f"the run has not started training: no {root}/{RUN_FACTS} on rank 0's host {host}")
        copy = into / "checkpoints"
        copy.mkdir()
        for name in where.names(latest):
            if name in (RUN_FACTS, "metrics.jsonl", "best.json", RECORD):  # the record: which are the run's
                where.copy(f"{latest}/{name}", copy / name)
            elif NAME.match(name):
                (copy / name).touch()
    except OSError as exc:
        raise ClipflowError(f"{host}: cannot read the run's files in {root} ({exc.strerror or exc})") from None
    finally:
        where.close()
    return copy, f"{host}:{latest}"


FACTS = {"recipe": str, "epochs": int}  # what status needs of run.json, as the trainer writes it
RECORD = {"epoch": int, "epoch_time": float, "clips_per_s": float}  # and of every metrics.jsonl line
BEST = {"val_top1": float}  # and of best.json
FIX_FACTS = "the trainer writes it when a run starts or resumes: rerun the train stage to write it again"
FIX_HISTORY = "the trainer writes one JSON object an epoch: remove the broken line, or restore the file"
FIX_BEST = "the trainer writes it beside best.pt: restore it, or remove both"


def _started(checkpoints: Path) -> bool:
    """The run's checkpoint folder holds its run.json; a folder this process may not look into is a ClipflowError
    naming it (not a run that seems not to have started)."""
    try:
        if checkpoints.is_dir():
            list(checkpoints.iterdir())  # a folder that may not be read is named, not taken for one not started
        return (checkpoints / RUN_FACTS).is_file()
    except PermissionError as exc:
        raise ClipflowError(f"{exc.filename} cannot be read: permission denied (check its mode and owner)") from None


def _is(value: object, kind: type) -> bool:
    """``value`` is of ``kind``, as JSON gives it: an int is a float too; a bool is neither."""
    return not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else kind)


def _fields_ok(record: dict, fields: dict[str, type]) -> bool:
    return all(_is(record.get(key), kind) for key, kind in fields.items())


def _read_facts(path: Path) -> dict:
    """run.json: an object with the recipe and the epochs."""
    expected = f"an object with {', '.join(FACTS)}; {FIX_FACTS}"
    facts = read_json_object(path, "", expected)
    if not _fields_ok(facts, FACTS):
        raise ClipflowError(f"{path} is not a run's facts: expected {expected}")
    return facts


def _read_history(path: Path) -> list[dict]:
    """metrics.jsonl: one object an epoch, each with its epoch, its time and its clips/s; none before the first."""
    if not path.is_file():
        return []
    expected = f"one metrics record a line; {FIX_HISTORY}"
    history = []
    for number, record in record_lines(path, "", expected):
        if not _fields_ok(record, RECORD):
            raise ClipflowError(f"{path} line {number} is not a metrics record ({', '.join(RECORD)}); {FIX_HISTORY}")
        history.append(record)
    return history


def _read_best(path: Path) -> float:
    """best.json's val_top1."""
    expected = f"an object with {', '.join(BEST)}; {FIX_BEST}"
    best = read_json_object(path, "", expected)
    if not _fields_ok(best, BEST):
        raise ClipflowError(f"{path} is not a best-checkpoint record: expected {expected}")
    return best["val_top1"]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"
