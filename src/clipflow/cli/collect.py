"""`clipflow collect`: a run's logs, model and checkpoints brought home from their hosts, checksums verified."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clipflow.schemas import config_defaults, config_enum


def cmd_collect(a: argparse.Namespace) -> int:
    from clipflow.collect.gather import MANIFEST, collect_run
    from clipflow.hosts.plan import Plan
    from clipflow.launch.start import HostRun

    local = HostRun.of(a.staged, a.host_dir)
    host_dir = local.folder if local else ""
    outcome = collect_run(Plan.read(a.plan), a.log_dir, a.checkpoint_root, a.model, Path(a.out), a.backend,
                          log=lambda line: print(line, file=sys.stderr), host_dir=host_dir)  # fmt: skip
    hosts = len({f.host for f in outcome.files if f.kind != "restarts"})  # restarts.jsonl: the launcher's, here
    print(f"collected {len(outcome.files)} files from {hosts} host(s), every sha256 verified: {outcome.out / MANIFEST}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help="bring a run's logs, model and checkpoints home, checksums verified")
    p.add_argument("--plan", required=True)
    p.add_argument("--log-dir", required=True, help="train launch's --log-dir (the roles' own logs are under it)")
    p.add_argument("--checkpoint-root", required=True, help="train launch's --checkpoint-root")
    p.add_argument("--model", required=True, help="train launch's --model-out")
    p.add_argument("--backend", default=config_defaults("train")["backend"], choices=config_enum("train", "backend"),
                   help="train launch's --backend (one the run did not train with is named)")  # fmt: skip
    p.add_argument("--out", required=True, help="the collection folder: a new or empty one, or an earlier collection "
                   "(replaced whole); manifest.json in it when all verified")  # fmt: skip
    p.add_argument("--staged", default="", help="the staging stage's staged.json: with storage local the run's "
                   "files are in --host-dir on the hosts")  # fmt: skip
    p.add_argument("--host-dir", default="", help="storage local: the run's folder on every host")
    p.set_defaults(func=cmd_collect)
