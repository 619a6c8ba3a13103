"""What collection brings home from each host of a plan, and the checks on every copy.

From every host: the log each role placed there kept (:mod:`clipflow.host_log`). From worker 0's host (rank 0
writes the checkpoints): the final model, best.pt and best.json when validation saved them, and the newest
checkpoint of the run's checkpoint folder (the checkpoint root, where run.json is). From the launching node: the
launcher's record of the attempts, ``restarts.jsonl``, when it wrote one. Each
file comes with the ``.sha256`` its writer recorded; the copy's sha256 must equal it. Copies go to
``<out>.partial/``, which becomes ``<out>/`` with ``manifest.json`` only when every file is verified; otherwise
``<out>/`` holds no manifest and every problem is reported, each naming its host and file.

Since ``<out>/`` is replaced whole by the next complete collection, collect writes only to a folder of its own:
every folder it makes holds :data:`MARKER`, and an ``--out`` (or its ``.partial``) that exists without it and is
not empty (a run's own folder, ``.``, a home folder) is refused before anything is fetched.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

import paramiko

from clipflow.checksums import SUFFIX
from clipflow.errors import ClipflowError
from clipflow.files import DiskFull, write_text_atomic
from clipflow.host_log import host_log_path
from clipflow.hosts.files import LocalFiles, open_host
from clipflow.hosts.plan import Plan, Role
from clipflow.hosts.transfer import fetch_checked
from clipflow.train.checkpoint import RUN_FACTS, checkpoint_name, points_there
from clipflow.train.restarts import RESTARTS_FILE

MANIFEST = "manifest.json"
MARKER = ".clipflow-collection"  # in every folder collect makes: the proof that it may replace or remove it
MARKER_TEXT = ("made by `clipflow collect`: the next collection into this folder replaces it whole, "
               "so keep nothing of your own here\n")  # fmt: skip


@dataclass
class Wanted:
    kind: str  # log | model | checkpoint | best | best_facts | restarts; own disks: history | run_facts | tensorboard
    remote: str  # as the writer named it on its host
    local: str  # under the collection folder
    role: str | None = None
    rank: int | None = None


@dataclass
class Collected:
    host: str
    kind: str
    role: str | None
    rank: int | None
    remote: str
    local: str
    sha256: str
    bytes: int
    verified: bool


@dataclass
class Outcome:
    files: list[Collected]
    problems: list[str]
    out: Path
    partial: Path


# what a dropped ssh connection raises (paramiko's SSHException, EOFError) besides OSError
LOST = (OSError, EOFError, paramiko.SSHException)


def collect(plan: Plan, log_dir: str, checkpoint_root: str, model: str, out: Path, backend: str = "ps",
            host_dir: str = "", home_root: str = "") -> Outcome:  # fmt: skip
    """The files of the module's docstring into ``out``. ``host_dir``: the run's folder on hosts with their own
    disks (storage local): the roles worked there, and rank 0's history, run facts and TensorBoard files, which
    exist only on its host, come home too. ``home_root``: the checkpoint root on the launching node, whose
    restarts.jsonl (the launcher's record of the attempts, :mod:`clipflow.train.restarts`) is copied too, checked,
    when the launcher wrote one."""
    rank0_host = plan.rank0_host()
    out, partial = check_out(out)
    try:
        (out / MANIFEST).unlink(missing_ok=True)  # an earlier collection must not pass for this one
        _remove_own(partial)
        (partial / "logs").mkdir(parents=True)
        write_text_atomic(partial / MARKER, MARKER_TEXT)
        (partial / "checkpoints").mkdir()
        (partial / "tensorboard").mkdir()
    except OSError as exc:
        raise ClipflowError(f"cannot write the collection to --out {out} ({exc.strerror or exc})") from None
    files: list[Collected] = []
    problems: list[str] = []
    for host in plan.role_hosts():
        roles = [r for r in plan.roles if r.host == host and (backend == "ps" or r.role == "worker")]
        if not roles:
            continue
        try:
            where = open_host(plan, host, host_dir)
        except ClipflowError as exc:
            problems.append(f"host {host}: cannot reach it to collect its files: {exc}")
            continue
        try:
            wanted = [_log(r, log_dir) for r in roles]
            if host == rank0_host:
                wanted += _rank0_files(where, checkpoint_root, model, backend, problems, own_disk=bool(host_dir))
            for item in wanted:
                got = _fetch(where, item, partial, problems)
                if got:
                    files.append(got)
        except LOST as exc:  # the connection dropped while listing or copying: this host's files stop here
            problems.append(f"host {host}: the connection was lost while collecting ({exc or type(exc).__name__})")
        finally:
            where.close()
    restarts = Path(home_root) / RESTARTS_FILE
    if home_root and restarts.exists():
        got = _fetch(LocalFiles("home", Path.cwd()), Wanted("restarts", str(restarts), RESTARTS_FILE), partial,
                     problems)  # fmt: skip
        if got:
            files.append(got)
    if not problems:
        _replace_own(out, partial)
        for f in files:
            f.local = str(out / Path(f.local).relative_to(partial))
        manifest = {"plan": plan.hosts, "verified": True, "files": [asdict(f) for f in files]}
        write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return Outcome(files, problems, out, partial)


def check_out(out: str | Path) -> tuple[Path, Path]:
    """``out`` and its ``.partial`` folder, each refused unless missing, an empty folder or a folder collect made
    (it holds :data:`MARKER`): a complete collection replaces ``out`` whole, so anything else there would be lost.
    Called before anything is fetched; ClipflowError naming the path and the way out."""
    out = Path(out)
    real = Path(os.path.normpath(out.absolute()))
    real = real.parent.resolve() / real.name if real.name else real  # links above it resolved
    if Path.cwd().resolve().is_relative_to(real):  # '.', '..', '/', the home folder one runs in
        raise ClipflowError(
            f"--out {out} is the folder collect runs in ({Path.cwd()}) or holds it: collect replaces its output "
            f"folder whole, so name a new folder (e.g. --out {out / 'collected'}); nothing was changed"
        )
    partial = out.with_name(out.name + ".partial")
    for folder in (out, partial):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            _refuse(out, folder, "a link" if folder.is_symlink() else "a file")
        if folder.is_dir() and not _is_own(folder):
            _refuse(out, folder, f"a folder collect did not make (it holds files and no {MARKER})")
    return out, partial


def _refuse(out: Path, folder: Path, what: str) -> NoReturn:
    """The refusal of an ``--out`` whose folder (or ``.partial`` folder) is not collect's own."""
    fix = f"move {folder} away"
    if folder == out:  # a collection of a clipflow before the marker has none either: its owner removes it
        fix = f"name a new folder (e.g. --out {out / 'collected'}), or remove it if it is an unmarked older collection"
    raise ClipflowError(
        f"--out {out}: {folder} is {what}; collect replaces its output folder whole, so it writes only to a new "
        f"folder or one of its own earlier collections: {fix}; nothing was changed"
    )


def _is_own(folder: Path) -> bool:
    """A folder collect may replace: one it made (its marker is there), or an empty one (nothing to lose; the
    workflow makes the output's folder before the rule runs)."""
    return (folder / MARKER).is_file() or not any(folder.iterdir())


def _remove_own(folder: Path) -> None:
    """Removes ``folder`` when it is there, after checking once more that it is collect's own."""
    if folder.is_symlink() or (folder.exists() and not (folder.is_dir() and _is_own(folder))):
        raise ClipflowError(f"{folder} changed while collecting and is no longer collect's own folder: left as it is")
    if folder.exists():
        shutil.rmtree(folder)  # collect's own folder (checked just above): nothing of anyone else's is in it


def _replace_own(out: Path, partial: Path) -> None:
    """The complete collection in ``partial`` becomes ``out``, the earlier collection there (if any) removed."""
    try:
        _remove_own(out)
        partial.rename(out)
    except OSError as exc:
        raise ClipflowError(
            f"cannot move the collection from {partial} to --out {out} ({exc.strerror or exc}); the verified "
            f"copies are in {partial}"
        ) from None


def _log(role: Role, log_dir: str) -> Wanted:
    name = f"{role.role}-{role.rank}.log"
    return Wanted("log", host_log_path(log_dir, role.role, role.rank), f"logs/{name}", role.role, role.rank)


def _rank0_files(where, checkpoint_root: str, model: str, backend: str, problems: list[str],
                 own_disk: bool = False) -> list[Wanted]:  # fmt: skip
    """The final model, and from the run's checkpoint folder the newest checkpoint and best.pt/best.json; on a
    host's own disk (``own_disk``) also the run's history and facts, and the TensorBoard files beside the
    checkpoint root (in the run's folder there)."""
    wanted = [Wanted("model", model, posixpath.basename(model))]
    run = checkpoint_root  # the run's own folder: its checkpoints straight in it
    if not where.exists(f"{run}/{RUN_FACTS}"):
        problems.append(
            f"host {where.host}: {where.shown(checkpoint_root)}: not the checkpoint folder of a run (no "
            f"{RUN_FACTS} in it); is --checkpoint-root the one training wrote to?"
        )
        return wanted
    try:
        trained = json.loads(where.read_text(f"{run}/{RUN_FACTS}")).get("backend")
    except (OSError, ValueError, AttributeError):
        trained = None  # the checksums below still check every file
    if trained and trained != backend:
        problems.append(f"host {where.host}: {where.shown(run)}: the run trained with --backend {trained}, "
                        f"not {backend}: collect with --backend {trained}")  # fmt: skip
    names = where.names(run)
    points = points_there(where, run)  # the run's, as its record names them
    if points:
        name = checkpoint_name(*points[-1])
        wanted.append(Wanted("checkpoint", f"{run}/{name}", f"checkpoints/{name}"))
    else:
        problems.append(f"host {where.host}: {where.shown(run)}: no checkpoint (epoch_*.pt) in the run's folder")
    if "best.pt" in names or "best.json" in names:  # saved when validation ran
        wanted += [Wanted("best", f"{run}/best.pt", "checkpoints/best.pt"),
                   Wanted("best_facts", f"{run}/best.json", "checkpoints/best.json")]  # fmt: skip
    if own_disk:
        wanted += [Wanted("history", f"{run}/metrics.jsonl", "checkpoints/metrics.jsonl"),
                   Wanted("run_facts", f"{run}/{RUN_FACTS}", f"checkpoints/{RUN_FACTS}")]  # fmt: skip
        board = posixpath.join(posixpath.dirname(checkpoint_root), "tensorboard")
        events = [name for name in where.names(board) if name.startswith("events.") and not name.endswith(SUFFIX)]
        wanted += [Wanted("tensorboard", f"{board}/{name}", f"tensorboard/{name}") for name in events]
    return wanted


def _fetch(where, item: Wanted, partial: Path, problems: list[str]) -> Collected | None:
    """``item`` copied into ``partial`` and checked (:func:`clipflow.hosts.transfer.fetch_checked`); a problem
    recorded instead when it is missing, unchecked, damaged or its copy fails."""
    local = partial / item.local
    try:
        digest = fetch_checked(where, item.remote, local, checksum_beside=False)
    except DiskFull:
        raise  # the collection stops: no file after it would fit either
    except ClipflowError as exc:
        problems.append(str(exc))
        return None
    except OSError as exc:  # LOST beyond OSError goes up to the host's loop: nothing more comes from it
        problems.append(f"host {where.host}: {where.shown(item.remote)}: the copy failed ({exc})")
        return None
    return Collected(where.host, item.kind, item.role, item.rank, where.shown(item.remote), str(local), digest,
                     local.stat().st_size, True)  # fmt: skip


def collect_run(plan: Plan, log_dir: str, checkpoint_root: str, model: str, out: Path, backend: str = "ps",
                log=print, host_dir: str = "") -> Outcome:  # fmt: skip
    """:func:`collect` with the paths as `train launch` gave them to the workers (absolute; with ``host_dir``,
    in the run's folder on the hosts' own disks); logs every problem and raises ClipflowError when there is one,
    so that no manifest means a failed stage."""
    home_root = str(Path(checkpoint_root).absolute())
    if host_dir:
        model, checkpoint_root = f"{host_dir}/train/model_final.pt", f"{host_dir}/checkpoints"
    else:
        model, checkpoint_root = str(Path(model).absolute()), home_root
    outcome = collect(plan, log_dir, checkpoint_root, model, out, backend, host_dir, home_root)
    if outcome.problems:
        for problem in outcome.problems:
            log(f"clipflow: error: {problem}")
        raise ClipflowError(
            f"{len(outcome.problems)} problem(s) collecting the run: no {MANIFEST} written; the verified copies "
            f"so far are in {outcome.partial}"
        )
    return outcome
