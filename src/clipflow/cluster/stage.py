"""Staging: each host gets, in a folder of its own disk, only the videos its workers read.

With local storage (checks.json's storage decision, :mod:`clipflow.cluster.storage`) the hosts share no file
system, so before training each host receives the train lists of its workers and its share of the validation
list, under ``<stage_dir>/<name>``, the files under their list paths. The stage goes in this order, and refuses
before anything is copied anywhere:

1. what each host needs (:func:`host_shares`), every file of it recorded in the scan's videos.json;
2. the sources still the scanned ones (:func:`check_sources`): a file whose size or mtime changed is hashed, and
   a sha256 that differs from the scan's is refused (the data set would no longer be the one scanned);
3. every host probed at once (:data:`PROBE`): its staging folder made and proven writable, rsync there, the free
   bytes, and the files already staged (its ``.clipflow-staged.json`` record, whose entries match the scan's
   sha256 and the files' current size and mtime). A host that cannot take its share is refused with its
   figures, all such hosts in one message;
4. rsync of the files not staged yet, one per host at once, with a progress line per host every ~2 s. rsync
   keeps an interrupted file in ``.clipflow-partial`` and skips complete ones, so a stopped stage resumes;
5. each host hashes what was not recorded yet (:data:`VERIFY`), removes a file that does not match the scan
   and records the good ones in its ``.clipflow-staged.json`` (kept across data sets' recipes: the folder
   belongs to the data, so another recipe on the same data copies nothing new);
6. staged.json, what each host holds, written for the workflow and the launcher.

Progress counts whole files: rsync reports each file when it is complete (``--out-format`` with ``%b``, which
makes rsync log at the end of a file's transfer), so a line shows the bytes of the files finished so far. That
keeps the parsing to one plain line per file (``--info=progress2`` rewrites one line with carriage returns and
counts files rsync skips); a single large file shows its progress only once it is done.
"""

from __future__ import annotations

import json
import posixpath
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from clipflow.checksums import sha256_of
from clipflow.cluster.storage import read_storage
from clipflow.data.listfile import read_list
from clipflow.data.scan import RERUN, RESCAN, VideoRecord, read_video_records
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import Plan
from clipflow.hosts.remote_python import RemoteScriptError, run_remote_python
from clipflow.hosts.ssh import SshSettings, connect
from clipflow.hosts.sync import rsync_failure, ssh_shell

if TYPE_CHECKING:
    from fabric import Connection

RECORD = ".clipflow-staged.json"
PARTIAL_DIR = ".clipflow-partial"
PROGRESS_EVERY_S = 2.0
REMOTE_TIMEOUT_S = 3600.0  # a verify hashes a host's whole share
MARK = "CLIPFLOW_STAGE "

# Run with the plan's Python on a host; reads {"folder", "files"} on stdin.
PROBE = r"""
import json, os, shutil, sys, tempfile
want = json.load(sys.stdin)
folder = os.path.abspath(os.path.expanduser(want["folder"]))
out = {"folder": folder, "rsync": shutil.which("rsync") or "", "problem": "", "staged": {}}
try:
    os.makedirs(folder, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".clipflow-probe-", dir=folder)
    os.close(fd)
    os.unlink(probe)
except OSError as exc:
    out["problem"] = "%s is not writable (%s)" % (folder, exc.strerror or exc)
where = folder
while not os.path.isdir(where):
    where = os.path.dirname(where)
st = os.statvfs(where)
out["free"] = st.f_bavail * st.f_frsize
try:
    with open(os.path.join(folder, ".clipflow-staged.json")) as fh:
        record = json.load(fh)["files"]
except (OSError, ValueError, KeyError, TypeError):
    record = {}
for path in want["files"] if isinstance(record, dict) else []:
    entry = record.get(path)
    try:
        st = os.stat(os.path.join(folder, path))
    except OSError:
        continue
    if isinstance(entry, dict):
        out["staged"][path] = {"entry": entry, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
print("CLIPFLOW_REPLY " + json.dumps(out))
"""

# Run with the plan's Python on a host; reads {"folder", "check": {path: sha256}} on stdin.
VERIFY = r"""
import hashlib, json, os, sys, tempfile
want = json.load(sys.stdin)
folder = want["folder"]
name = os.path.join(folder, ".clipflow-staged.json")
try:
    with open(name) as fh:
        files = json.load(fh)["files"]
    assert isinstance(files, dict)
except (OSError, ValueError, KeyError, TypeError, AssertionError):
    files = {}
bad = []
for path, sha in sorted(want["check"].items()):
    full = os.path.join(folder, path)
    files.pop(path, None)
    try:
        digest = hashlib.sha256()
        with open(full, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        st = os.stat(full)
    except OSError as exc:
        bad.append([path, "missing (%s)" % (exc.strerror or exc)])
        continue
    if digest.hexdigest() != sha:
        os.unlink(full)
        bad.append([path, digest.hexdigest()])
        continue
    files[path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
fd, tmp = tempfile.mkstemp(prefix=".clipflow-staged.", suffix=".tmp", dir=folder)
try:
    with os.fdopen(fd, "w") as fh:
        json.dump({"version": 1, "files": files}, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, name)
except BaseException:
    os.unlink(tmp)
    raise
print("CLIPFLOW_REPLY " + json.dumps({"bad": bad}))
"""

# Run with the plan's Python on a host; reads {"stage_dir", "name"} on stdin.
UNSTAGE = r"""
import json, os, shutil, sys
want = json.load(sys.stdin)
base = os.path.abspath(os.path.expanduser(want["stage_dir"]))
if want["name"]:
    folders = [os.path.join(base, want["name"])]
elif os.path.isdir(base):
    folders = sorted(os.path.join(base, n) for n in os.listdir(base) if os.path.isdir(os.path.join(base, n)))
else:
    folders = []
out = {"removed": [], "refused": [], "absent": []}
for folder in folders:
    if not os.path.lexists(folder):
        out["absent"].append(folder)
    elif os.path.islink(folder) or not os.path.isfile(os.path.join(folder, ".clipflow-staged.json")):
        out["refused"].append(folder)
    else:
        size = sum(os.lstat(os.path.join(d, n)).st_size for d, _, names in os.walk(folder) for n in names)
        shutil.rmtree(folder)
        out["removed"].append([folder, size])
print("CLIPFLOW_REPLY " + json.dumps(out))
"""


@dataclass
class HostShare:
    """What one host needs: its key in the plan (``Role.host``) and the files, train and val counted apart."""

    host: Host
    key: str
    files: list[str] = field(default_factory=list)
    train_files: int = 0
    val_files: int = 0


@dataclass
class HostState:
    """A host as probed, and what is left to copy there."""

    share: HostShare
    folder: str = ""  # the staging folder, absolute there
    free: int = 0
    rsync: str = ""
    problem: str = ""
    staged: set[str] = field(default_factory=set)
    to_copy: list[str] = field(default_factory=list)
    copy_bytes: int = 0
    done_bytes: int = 0
    done_files: int = 0
    started: float = 0.0
    finished: bool = False


def human_bytes(n: float) -> str:
    """``n`` bytes in decimal units: ``512 B``, ``64.0 kB``, ``1.2 MB``."""
    if n < 1000:
        return f"{int(n)} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def check_name(name: str) -> None:
    """A data set's staging name is one folder name (it is removed again by ``cluster unstage``)."""
    if not name or name in (".", "..") or "/" in name or name.startswith(".") or any(c.isspace() for c in name):
        raise ClipflowError(
            f"--name {name!r} is not a folder name: give one name without '/', spaces or a leading dot, "
            "e.g. synthetic-1a2b3c4d"
        )


def stage_root(stage_dir: str, name: str) -> str:
    """The staged data root as workers are told it (``~/`` kept: each host expands it)."""
    return posixpath.join(stage_dir.rstrip("/") or "/", name)


def host_shares(plan: Plan, index_dir: str | Path, splits_dir: str | Path) -> dict[str, HostShare]:
    """Per plan host (``Role.host``): its workers' train lists and val entries ``val[r::W]``, deduplicated."""
    val = read_list(Path(index_dir) / "val.lst")
    shares = {}
    for host in plan.host_list():
        key = str(replace(host, slots=1))
        share = HostShare(host, key)
        ranks = plan.worker_ranks(key)
        train = dict.fromkeys(e.path for r in ranks for e in read_list(Path(splits_dir) / f"worker{r}.lst"))
        val_paths = dict.fromkeys(e.path for r in ranks for e in val[r :: plan.num_workers])
        share.files = list(dict.fromkeys([*train, *val_paths]))
        share.train_files, share.val_files = len(train), len(val_paths)
        shares[key] = share
    return shares


def check_records(shares: dict[str, HostShare], records: dict[str, VideoRecord], index_dir: str | Path) -> None:
    """Every needed file is in videos.json, else the index and the lists disagree."""
    for share in shares.values():
        for path in share.files:
            if path not in records:
                raise ClipflowError(
                    f"{path}, in the lists of {share.key}'s workers, is not in {Path(index_dir) / 'videos.json'}: "
                    f"the index and the lists disagree; {RERUN}"
                )


def check_sources(paths: list[str], records: dict[str, VideoRecord], root: str | Path) -> None:
    """Each file under ``root`` is still the scanned one: same size and mtime, or else the same sha256."""
    for path in paths:
        rec, full = records[path], Path(root) / path
        try:
            st = full.stat()
        except OSError as exc:
            raise ClipflowError(
                f"video {path} cannot be read under {root} ({exc.strerror or exc}; recorded sha256 "
                f"{rec.sha256[:12]}): restore it, or rescan ({RESCAN})"
            ) from None
        if st.st_size == rec.size and st.st_mtime_ns == rec.mtime_ns:
            continue
        current = sha256_of(full)
        if current != rec.sha256:
            raise ClipflowError(
                f"video {full} changed since the scan (recorded sha256 {rec.sha256[:12]}, now {current[:12]}): "
                f"restore it, or rescan ({RESCAN})"
            )


def remote_python(conn: Connection, python: str, script: str, payload: dict, timeout_s: float) -> dict:
    """:func:`clipflow.hosts.remote_python.run_remote_python`, a script that does not answer a ClipflowError
    naming the host."""
    try:
        return run_remote_python(conn, python, script, payload, timeout_s)
    except RemoteScriptError as exc:
        raise ClipflowError(f"{conn.host}: the stage's check cannot run with {python} there ({exc.why})") from None


def probe_host(share: HostShare, records: dict[str, VideoRecord], settings: SshSettings, python: str,
               folder: str) -> HostState:  # fmt: skip
    """The host's staging folder, rsync, free bytes and already staged files; what is left to copy."""
    state = HostState(share)
    with connect(share.host, settings) as conn:
        facts = remote_python(conn, python, PROBE, {"folder": folder, "files": share.files}, 120)
    state.folder, state.free = facts["folder"], facts["free"]
    state.rsync, state.problem = facts["rsync"], facts["problem"]
    for path, seen in facts["staged"].items():
        entry, rec = seen["entry"], records[path]
        same = (entry.get("size"), entry.get("mtime_ns")) == (seen["size"], seen["mtime_ns"])
        if same and entry.get("sha256") == rec.sha256:
            state.staged.add(path)
    state.to_copy = [p for p in share.files if p not in state.staged]
    state.copy_bytes = sum(records[p].size for p in state.to_copy)
    return state


def refusal(state: HostState) -> str:
    """Why a probed host cannot take its share, or ''."""
    problems = [state.problem] if state.problem else []
    if state.to_copy and not state.rsync:
        problems.append("rsync is not installed there (Debian: apt install rsync)")
    if state.copy_bytes > state.free:
        problems.append(f"needs {human_bytes(state.copy_bytes)} in {state.folder}, has {human_bytes(state.free)} free")
    return f"{state.share.key}: {'; '.join(problems)}" if problems else ""


def rsync_stage_argv(state: HostState, root: str | Path, files_from: str, settings: SshSettings) -> list[str]:
    """rsync of the listed files (relative to ``root``) into the host's staging folder, resumable."""
    target = f"{state.share.host.target}:{state.folder.rstrip('/')}/"
    return ["rsync", "-a", "--protect-args", f"--partial-dir={PARTIAL_DIR}", f"--files-from={files_from}",
            "--from0", f"--out-format={MARK}%b %l %n", "-e", ssh_shell(state.share.host, settings),
            f"{str(root).rstrip('/')}/", target]  # fmt: skip


def copy_to_host(state: HostState, root: str | Path, settings: SshSettings) -> None:
    """rsync the files not staged yet to the host, counting finished files into ``state`` as they come."""
    with tempfile.NamedTemporaryFile("w", prefix="clipflow-stage-", suffix=".files") as listing, \
            tempfile.TemporaryFile("w+") as errors:  # fmt: skip
        listing.write("".join(f"{p}\0" for p in state.to_copy))
        listing.flush()
        argv = rsync_stage_argv(state, root, listing.name, settings)
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True)
        except FileNotFoundError:
            raise ClipflowError("rsync is not installed on the launching node (Debian: apt install rsync)") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARK):
                _, length, name = line.removeprefix(MARK).rstrip("\n").split(" ", 2)
                if not name.endswith("/"):
                    state.done_bytes += int(length)
                    state.done_files += 1
        status = proc.wait()
        if status != 0:
            errors.seek(0)
            why = rsync_failure(status, errors.read(), state.folder)
            raise ClipflowError(f"{state.share.key}: rsync of {root} to {state.folder} failed (exit {status}): {why}")


def verify_host(state: HostState, records: dict[str, VideoRecord], settings: SshSettings, python: str) -> None:
    """Hash on the host every file not recorded yet; record the good ones, remove and report the others."""
    check = {p: records[p].sha256 for p in state.to_copy}
    with connect(state.share.host, settings) as conn:
        result = remote_python(conn, python, VERIFY, {"folder": state.folder, "check": check}, REMOTE_TIMEOUT_S)
    bad = [
        f"{path}: recorded sha256 {records[path].sha256[:12]}, got {got[:12] if len(got) == 64 else got}"
        for path, got in result["bad"]
    ]
    if bad:
        raise ClipflowError(
            f"{state.share.key}: {len(bad)} staged file(s) do not match the scan and were removed there "
            f"({'; '.join(bad)}); rerun the stage, and if it happens again check the host's disk"
        )


def progress_line(state: HostState, took: float | None = None) -> str:
    """``stage <host>: 3.1 MB of 9.4 MB (33%), 1.2 MB/s, ETA 5 s``; once done (``took`` seconds), ``in 7.8 s``
    instead of the ETA."""
    elapsed = max(time.monotonic() - state.started if took is None else took, 1e-6)
    rate = state.done_bytes / elapsed
    left = state.copy_bytes - state.done_bytes
    eta = f"ETA {left / rate:.0f} s" if rate > 0 else "ETA -"
    if took is not None:
        eta = f"in {took:.1f} s"
    percent = 100 * state.done_bytes // max(state.copy_bytes, 1)
    done, total = human_bytes(state.done_bytes), human_bytes(state.copy_bytes)
    return f"stage {state.share.key}: {done} of {total} ({percent}%), {human_bytes(rate)}/s, {eta}"


def stage_host(state: HostState, records: dict[str, VideoRecord], root: str | Path, settings: SshSettings,
               python: str, log: Callable[[str], None]) -> float:  # fmt: skip
    """Copy then verify one host's missing files; the seconds it took."""
    state.started = time.monotonic()
    try:
        if state.to_copy:
            copy_to_host(state, root, settings)
            verify_host(state, records, settings, python)
    finally:
        state.finished = True
    seconds = time.monotonic() - state.started
    already = f"{len(state.staged)} already staged"
    if not state.to_copy:
        log(f"stage {state.share.key}: nothing to copy ({already}, {len(state.share.files)} files)")
    else:
        log(f"{progress_line(state, seconds)}; copied {state.done_files} files, {len(state.to_copy)} verified, "
            f"{already}")  # fmt: skip
    return seconds


def in_parallel(items: list, work: Callable, tick: Callable[[], None] | None = None) -> list:
    """``work(item)`` for every item, one thread each; ``tick`` every few seconds while they run. The results in
    order; the ClipflowErrors of all failed items raised as one, joined by `` | ``."""
    with ThreadPoolExecutor(max_workers=max(len(items), 1)) as pool:
        futures: list[Future] = [pool.submit(work, item) for item in items]
        while True:
            _, pending = wait(futures, timeout=PROGRESS_EVERY_S)
            if not pending:
                break
            if tick is not None:
                tick()
    problems = [str(f.exception()) for f in futures if isinstance(f.exception(), ClipflowError)]
    if problems:
        raise ClipflowError(" | ".join(problems))
    return [f.result() for f in futures]


def reads_in_place(plan: Plan) -> str:
    """What makes the plan's roles read the data where it is, or '' for an ssh plan: staging copies to ssh hosts
    with their own disks (cluster.storage); the local launcher's roles all run on this machine, the slurm
    launcher's nodes read the data root at its path."""
    if plan.launcher == "ssh":
        return ""
    if plan.launcher == "local":
        return "the plan's launcher is local: every role runs on this machine and"
    return f"the plan's launcher is {plan.launcher}: every role"


def write_shared(out: str | Path) -> dict:
    """staged.json when nothing is staged: the roles read the data root itself."""
    summary = {"version": 1, "storage": "shared"}
    write_text_atomic(out, json.dumps(summary, indent=2) + "\n")
    return summary


def stage_data(plan: Plan, checks: str | Path, index_dir: str | Path, splits_dir: str | Path, root: str | Path,
               stage_dir: str, name: str, out: str | Path, log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Stage the data each host of ``plan`` reads (see the module docstring); staged.json's content, written to
    ``out``. With shared storage, or a plan whose roles read the data where it is (:func:`reads_in_place`), only
    ``{"version": 1, "storage": "shared"}`` is written."""
    in_place = reads_in_place(plan)
    if in_place:
        log(f"stage: {in_place} reads the data root {Path(root).absolute()} where it is, nothing to stage")
        return write_shared(out)
    storage = read_storage(checks)
    if storage.mode == "shared":
        log("stage: storage is shared, nothing to stage")
        return write_shared(out)
    check_name(name)
    if not stage_dir.startswith(("/", "~/")):
        raise ClipflowError(f"--stage-dir {stage_dir!r} must be an absolute path or start with ~/")
    root = Path(root).absolute()
    records = read_video_records(index_dir)
    shares = host_shares(plan, index_dir, splits_dir)
    check_records(shares, records, index_dir)
    needed = list(dict.fromkeys(p for s in shares.values() for p in s.files))
    check_sources(needed, records, root)
    settings, folder = plan.ssh_settings(), stage_root(stage_dir, name)
    busy = [s for s in shares.values() if s.files]
    states = in_parallel(busy, lambda s: probe_host(s, records, settings, plan.python, folder))
    refused = [why for why in map(refusal, states) if why]
    if refused:
        raise ClipflowError("cannot stage the data, nothing was copied: " + " | ".join(refused))
    lock = threading.Lock()

    def log_locked(line: str) -> None:
        with lock:
            log(line)

    def tick() -> None:
        for state in states:
            if state.to_copy and state.started and not state.finished:
                log_locked(progress_line(state))

    seconds = in_parallel(states, lambda s: stage_host(s, records, root, settings, plan.python, log_locked), tick)
    hosts = {}
    for state, took in zip(states, seconds, strict=True):
        share = state.share
        hosts[share.key] = {
            "root": folder,
            "files": len(share.files),
            "bytes": sum(records[p].size for p in share.files),
            "train_files": share.train_files,
            "val_files": share.val_files,
            "copied_bytes": state.done_bytes,
            "copied_files": state.done_files,
            "seconds": round(took, 3),
        }
    summary = {
        "version": 1,
        "storage": "local",
        "name": name,
        "stage_dir": stage_dir,
        "source_root": str(root),
        "total_bytes": sum(record.size for record in records.values()),  # the data set: every video the scan kept
        "total_files": len(records),
        "needed_bytes": sum(records[p].size for p in needed),  # what the hosts read together
        "needed_files": len(needed),
        "hosts": hosts,
    }
    write_text_atomic(out, json.dumps(summary, indent=2) + "\n")
    return summary


def unstage_host(host: Host, settings: SshSettings, python: str, stage_dir: str, name: str) -> dict:
    """Remove the staged folders on one host (see :data:`UNSTAGE`); what was removed, refused, absent."""
    with connect(host, settings) as conn:
        return remote_python(conn, python, UNSTAGE, {"stage_dir": stage_dir, "name": name}, 600)


def unstage(plan: Plan, stage_dir: str, name: str = "", log: Callable[[str], None] = print) -> dict[str, dict]:
    """On every host, remove ``<stage_dir>/<name>`` (without ``name``: every folder there holding the stage's
    record). A folder without the record was not made by the stage: it is left and named (an error with
    ``name``)."""
    if name:
        check_name(name)
    in_place = reads_in_place(plan)
    if in_place:
        log(f"unstage: {in_place} reads the data where it is, so clipflow cluster stage copied nothing for it: "
            "nothing to unstage; to remove data staged for an ssh plan, give that plan")  # fmt: skip
        return {}
    settings, hosts = plan.ssh_settings(), plan.host_list()
    results = in_parallel(hosts, lambda h: unstage_host(h, settings, plan.python, stage_dir, name))
    refused = []
    for host, result in zip(hosts, results, strict=True):
        key = str(replace(host, slots=1))
        for folder, size in result["removed"]:
            log(f"unstage {key}: removed {folder} ({human_bytes(size)})")
        for folder in result["absent"]:
            log(f"unstage {key}: {folder} is not there")
        for folder in result["refused"]:
            log(f"unstage {key}: left {folder}: it holds no {RECORD} (not made by clipflow cluster stage)")
            refused.append(f"{key}: {folder}")
        if not any(result.values()):
            log(f"unstage {key}: nothing staged under {stage_dir}")
    if refused and name:
        raise ClipflowError(
            f"not removed, as they hold no {RECORD} (not made by clipflow cluster stage): {', '.join(refused)}; "
            "remove them by hand if they are yours to remove"
        )
    return {str(replace(h, slots=1)): r for h, r in zip(hosts, results, strict=True)}
