"""Soak: one training on three network-namespace hosts, faults injected at random times, nothing lost.

The hosts are the tests' (``tests/netns_hosts.py``: an sshd in a network namespace each, on a bridge; root
only). The job: the tiny SlowFast recipe on the tiny synthetic set (16 training videos), the ``ps`` back end
with a scheduler, 3 servers and 3 workers (a worker and a server on each host), a checkpoint every
``--save-every`` iterations, ``train.max_restarts`` high and ``train.min_workers`` 3 (a restart that cannot
have all three hosts ends the launch; the soak then reruns the same command, as a user or the workflow would).
Checkpoints, ``restarts.jsonl`` and the history live on a small tmpfs of their own: the disk that fills.

Faults, ``--faults`` of them, one at a time, each at a random moment once the run has made progress since the
last one (a new line in the per-sample log), chosen at random (``--seed``) among:

* ``worker``: SIGKILL to a worker process on a random host;
* ``server``: SIGKILL to a server process on a random host;
* ``link``: a host's link cut for 2-5 s (packets dropped, as a pulled cable);
* ``notice``: SIGUSR1 to the launcher (a spot instance's notice): it stops on a checkpoint, exit 79, and the
  soak reruns it;
* ``disk``: the checkpoint disk filled to the last byte for 2-4 s, then freed.

Then it checks, against an unbroken run of the same job on the same hosts:

* samples: from the per-sample log (``CLIPFLOW_SAMPLE_LOG``), every sample of every epoch trained exactly as
  often as the epoch's lists hold it (the steps a later attempt went back over do not count);
* weights: every tensor of the final model equal (``torch.equal``) to the unbroken run's;
* files: every checkpoint left verifies against its ``.sha256``, no temporary file is left in the checkpoint
  folder, every line of ``restarts.jsonl`` and of the history is whole JSON.

    sudo .venv/bin/python bench/soak.py [--faults 20] [--seed 0] [--epochs 40]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TOP / "tests"), str(TOP / "tests" / "train")]  # the tests' hosts and sample-log reader

from netns_hosts import NetnsHosts, netns_pids  # noqa: E402
from sample_log_helpers import trained_per_epoch  # noqa: E402

from clipflow.data.listfile import VideoEntry, read_list, write_list  # noqa: E402
from clipflow.data.scan import scan  # noqa: E402
from clipflow.data.splits import write_splits  # noqa: E402
from clipflow.data.synthetic import SyntheticSpec, generate  # noqa: E402
from clipflow.hosts.ports import free_port  # noqa: E402

KINDS = ("worker", "server", "link", "notice", "disk")
KINDS_AT = {"notice": "the launcher", "disk": "the checkpoint disk (worker 0's, on host 1)"}
RESUMABLE = 79
DISK_MIB = 64


def env_of(hosts: NetnsHosts, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "CLIPFLOW_NO_PROGRESS": "1", "PYTHONUNBUFFERED": "1", "HOME": str(hosts.local_home),
                "CLIPFLOW_TORCH_THREADS": "1",  # the three hosts share this machine's cores
                **hosts.agent_env, **(extra or {})})  # fmt: skip
    return env


def clipflow(hosts: NetnsHosts, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "clipflow", *args], env=env_of(hosts), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"clipflow {args[0]} {args[1]} failed:\n{done.stdout}{done.stderr}")


class Job:
    """One training of the soak's job into ``folder`` (checkpoints under ``ckpt``), launched as often as needed."""

    def __init__(self, hosts: NetnsHosts, work: Path, folder: Path, ckpt: Path, recipe: dict, env: dict) -> None:
        self.hosts, self.folder, self.ckpt = hosts, folder, ckpt
        folder.mkdir(parents=True)
        self.samples = folder / "samples"
        self.argv = [sys.executable, "-m", "clipflow", "train", "launch", "--plan", str(work / "plan.json"),
                     "--log-dir", str(folder / "logs"), "--recipe", "slowfast_tiny_synthetic", "--overrides",
                     json.dumps(recipe), "--splits-dir", str(work / "splits"), "--train-list",
                     str(work / "train.lst"), "--root", str(work / "videos"), "--checkpoint-root", str(ckpt),
                     "--model-out", str(folder / "model.pt"), "--metrics-out", str(ckpt / "metrics.jsonl"),
                     "--grace", "5", "--max-restarts", "100", "--min-workers", "3"]  # fmt: skip
        self.env = env_of(hosts, {"CLIPFLOW_SAMPLE_LOG": str(self.samples), **env})
        self.launches: list[int] = []  # exit status of each launch
        self.proc: subprocess.Popen | None = None

    def run(self, on_start=None) -> None:
        """Launches until one exits 0; a launch that ends otherwise is rerun (at most 20 reruns)."""
        while not self.launches or self.launches[-1] != 0:
            if len(self.launches) > 20:
                raise SystemExit(f"{self.folder}: 20 reruns and not finished; see {self.folder}/launch-*.log")
            with (self.folder / f"launch-{len(self.launches)}.log").open("w") as log:
                self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
                if on_start:
                    on_start(self.proc)
                self.launches.append(self.proc.wait(timeout=1800))
            if self.launches[-1] not in (0, RESUMABLE):
                time.sleep(6)  # a host whose link was cut is back before the rerun checks it


def roles_on(hosts: NetnsHosts, i: int, role: str) -> list[int]:
    """Pids of host ``i``'s processes whose DMLC_ROLE is ``role``."""
    found = []
    for pid in netns_pids(hosts.hosts[i].name):
        with contextlib.suppress(OSError):
            if f"DMLC_ROLE={role}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
    return found


class Faults:
    """Injects ``count`` faults into a running :class:`Job`, each once the run has progressed since the last."""

    def __init__(self, hosts: NetnsHosts, job: Job, disk: Path, count: int, seed: int) -> None:
        self.hosts, self.job, self.disk, self.count = hosts, job, disk, count
        self.rng = random.Random(seed)
        self.done: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start_once(self, _proc) -> None:
        if self.thread.ident is None:
            self.thread.start()

    def _progress(self) -> int:
        return sum(p.stat().st_size for p in self.job.samples.glob("worker*.tsv"))

    def _loop(self) -> None:
        seen = self._progress()
        while len(self.done) < self.count and not self.stop.is_set():
            if self._progress() <= seen or self.job.proc is None or self.job.proc.poll() is not None:
                time.sleep(0.2)
                continue
            time.sleep(self.rng.uniform(0.2, 2.0))
            kind = self.rng.choice(KINDS)
            host = self.rng.randrange(len(self.hosts.hosts))
            began = time.monotonic()
            what = self._inject(kind, host)
            if what is None:
                continue
            where = f"host {host + 1}" if kind in ("worker", "server", "link") else KINDS_AT[kind]
            self.done.append({"kind": kind, "at": where, "what": what, "s": round(time.monotonic() - began, 1),
                              "launch": len(self.job.launches)})  # fmt: skip
            print(f"soak: fault {len(self.done)}/{self.count}: {kind}, {where}: {what}", flush=True)
            seen = self._progress()

    def _inject(self, kind: str, host: int) -> str | None:
        if kind in ("worker", "server"):
            pids = roles_on(self.hosts, host, kind)
            if not pids:
                return None  # between attempts: pick again
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[0], signal.SIGKILL)
            return f"SIGKILL to pid {pids[0]}"
        if kind == "link":
            cut = self.rng.uniform(2, 5)
            self.hosts.link_down(host)
            try:
                time.sleep(cut)
            finally:
                self.hosts.link_up(host)
            return f"link cut for {cut:.1f} s"
        if kind == "notice":
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.job.proc.pid, signal.SIGUSR1)
            return "SIGUSR1 to the launcher"
        ballast = self.disk / ".soak-ballast"
        free = fill(ballast)
        held = self.rng.uniform(2, 4)
        time.sleep(held)
        ballast.unlink()
        return f"{free >> 20} MiB filled for {held:.1f} s"


def fill(path: Path) -> int:
    """Writes ``path`` until its file system has no byte left (ENOSPC at a 1-byte write); the bytes written."""
    written, chunk = 0, 1 << 20
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while chunk:
            try:
                written += os.write(fd, b"\0" * chunk)
            except OSError:
                chunk //= 2
    finally:
        os.close(fd)
    return written


def last_word(log: Path) -> str:
    """The last line of a launch's log that clipflow or Python said as it ended (an error, a stop, a traceback's
    last line)."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("clipflow", "Traceback")) or ": [Errno" in line]
    return (said[-1] if said else lines[-1] if lines else "")[:300]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_files(ckpt: Path) -> list[str]:
    """What is wrong with the checkpoint folder's files: a checkpoint that does not verify, a temporary file, a
    record line that is not whole JSON."""
    wrong = []
    for path in sorted(ckpt.rglob("*")):
        if not path.is_file() or path.name.endswith(".sha256"):
            continue
        if path.name.startswith("."):
            if path.name != ".clipflow-made.json":
                wrong.append(f"{path}: a temporary file left")
            continue
        if path.suffix == ".pt":
            mark = path.with_name(path.name + ".sha256")
            if not mark.exists():
                wrong.append(f"{path}: no .sha256 beside it")
            elif mark.read_text().split()[0] != sha256(path):
                wrong.append(f"{path}: does not match its .sha256")
        if path.suffix == ".jsonl":
            for n, line in enumerate(path.read_text().splitlines(), 1):
                try:
                    json.loads(line)
                except ValueError:
                    wrong.append(f"{path}: line {n} is not whole JSON: {line[:80]!r}")
    return wrong


def unequal_tensors(a: Path, b: Path) -> list[str]:
    import torch

    wa, wb = (torch.load(p, weights_only=True)["model"] for p in (a, b))
    return sorted({*wa, *wb} - (wa.keys() & wb.keys())) + [k for k in wa if k in wb and not torch.equal(wa[k], wb[k])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=1, help="train.save_every_iters")
    parser.add_argument("--step-s", type=float, default=0.3, help="CLIPFLOW_FAULT_STEP_S of the faulted run")
    parser.add_argument("--keep", default="", help="keep the work folder here (default: a temporary one, removed)")
    a = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the soak needs root: network namespaces and a tmpfs")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the hosts, the mount and the folder go on SIGTERM too
    began = time.monotonic()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="clipflow-soak-"))
    disk = work / "disk"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(disk)], check=True)
    try:  # mounted before the hosts start: their mount namespaces are copies holding it
        figures = soak(a, work, disk)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    figures["wall_s"] = round(time.monotonic() - began)
    print(json.dumps(figures))
    sys.exit(0 if figures["ok"] else 1)


def soak(a: argparse.Namespace, work: Path, disk: Path) -> dict:
    generate(work / "videos", SyntheticSpec(num_train=16, num_val=4, min_frames=24, max_frames=40, short_side=64),
             workers=2)  # fmt: skip
    found = scan(read_list(work / "videos" / "train_labels.txt"), work / "videos", workers=2)
    write_list(work / "train.lst", [VideoEntry(r.path, r.label, r.num_frames) for r in found])
    write_splits(work / "train.lst", 3, 0, work / "splits")
    recipe = {"train": {"epochs": a.epochs, "batch_size": 2, "warmup_epochs": 0, "save_every_iters": a.save_every,
                        "keep_checkpoints": 3},
              "data": {"new_length": 8, "new_width": 42, "new_height": 32, "input_size": 32}}  # fmt: skip
    with NetnsHosts() as hosts:
        (work / "hosts").write_text("".join(f"{h.target}\n" for h in hosts.hosts))
        key = str(hosts.local_home / ".ssh" / "id_ed25519")
        known = str(work / "known_hosts")
        clipflow(hosts, "cluster", "keys", "--hosts-file", str(work / "hosts"), "--ssh-key", key, "--known-hosts",
                 known)  # fmt: skip
        clipflow(hosts, "cluster", "plan", "--launcher", "ssh", "--hosts-file", str(work / "hosts"), "--num-workers",
                 "3", "--num-servers", "3", "--root-port", str(free_port()), "--heartbeat-timeout", "6", "--ssh-key",
                 key, "--known-hosts", known, "--out", str(work / "plan.json"))  # fmt: skip
        print("soak: the unbroken run", flush=True)
        whole = Job(hosts, work, work / "whole", work / "whole" / "ckpt", recipe, {})
        whole.run()
        print(f"soak: the faulted run, {a.faults} faults (seed {a.seed})", flush=True)
        broken = Job(hosts, work, work / "broken", disk / "ckpt", recipe, {"CLIPFLOW_FAULT_STEP_S": str(a.step_s)})
        faults = Faults(hosts, broken, disk, a.faults, a.seed)
        broken.run(on_start=faults.start_once)
        faults.stop.set()
        faults.thread.join(timeout=30)
    planned = Counter(e.path for p in sorted((work / "splits").glob("*.lst")) for e in read_list(p))
    counts = trained_per_epoch(broken.samples)
    lost = {epoch: planned - counts.get(epoch, Counter()) for epoch in range(1, a.epochs + 1)}
    extra = {epoch: counts.get(epoch, Counter()) - planned for epoch in range(1, a.epochs + 1)}
    samples_lost = sum(sum(c.values()) for c in lost.values())
    samples_twice = sum(sum(c.values()) for c in extra.values())
    unequal = unequal_tensors(whole.folder / "model.pt", broken.folder / "model.pt")
    wrong = check_files(disk / "ckpt")
    record = disk / "ckpt" / "restarts.jsonl"
    restarts = record.read_text().splitlines() if record.exists() else []
    by_kind = Counter(f["kind"] for f in faults.done)
    endings = [last_word(broken.folder / f"launch-{n}.log") for n in range(len(broken.launches))]
    figures = {"bench": "soak", "seed": a.seed, "faults_asked": a.faults, "faults_injected": len(faults.done),
               "by_kind": dict(by_kind), "faults_survived": len(faults.done) if broken.launches[-1] == 0 else 0,
               "launches": broken.launches, "launch_endings": endings, "restarts_recorded": len(restarts),
               "samples_planned_per_epoch": sum(planned.values()), "epochs": a.epochs,
               "samples_lost": samples_lost, "samples_trained_twice": samples_twice,
               "weights_equal": not unequal, "unequal_tensors": unequal[:5], "files_wrong": wrong,
               "faults": faults.done}  # fmt: skip
    figures["ok"] = (len(faults.done) == a.faults and samples_lost == 0 and samples_twice == 0 and not unequal
                     and not wrong and broken.launches[-1] == 0)  # fmt: skip
    kinds = ", ".join(f"{k} {n}" for k, n in by_kind.items())
    print(f"soak: {len(faults.done)} of {a.faults} faults injected ({kinds})"
          f"; {len(broken.launches)} launches (exit {broken.launches}), {len(restarts)} attempts recorded")  # fmt: skip
    for n, (code, ending) in enumerate(zip(broken.launches, endings, strict=True)):
        print(f"soak: launch {n + 1} exit {code}: {ending}")
    print(f"soak: samples lost {samples_lost}, trained twice {samples_twice} (of {sum(planned.values())} an epoch "
          f"over {a.epochs} epochs); final weights {'equal' if not unequal else 'UNEQUAL'} to the unbroken run's; "
          f"files wrong: {len(wrong)}{': ' + '; '.join(wrong[:3]) if wrong else ''}")  # fmt: skip
    return figures


if __name__ == "__main__":
    main()
