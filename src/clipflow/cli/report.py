"""`clipflow report`: a run's page of curves and tables."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_report(a: argparse.Namespace) -> int:
    from clipflow.cli.args import json_object
    from clipflow.report.page import ReportInputs, write_report

    optional = {
        name: Path(value)
        for name in ("checks", "results", "collected", "staged", "restarts", "recipe", "train_list", "val_list")
        if (value := getattr(a, name))
    }
    if a.overrides:
        optional["overrides"] = json_object(a.overrides)
    inputs = ReportInputs(Path(a.metrics), Path(a.history), Path(a.manifest), Path(a.plan), **optional)
    print(f"report: {write_report(inputs, a.out_dir, run=a.run)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="curves and tables of a run, as HTML")
    p.add_argument("--metrics", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--checks", default="", help="the host checks (cluster/checks.json), when the run had them")
    p.add_argument("--results", default="", help="the folder of all runs: a scaling figure from those of this recipe")
    p.add_argument("--collected", default="", help="collect's manifest.json: the files brought home")
    p.add_argument("--staged", default="", help="the staging record (cluster/staged.json): bytes staged per host")
    p.add_argument("--restarts", default="", help="the launcher's restarts.jsonl (default: the copy in --collected)")
    p.add_argument("--recipe", default="", help="the run's recipe file: with it the reproduction audit")
    p.add_argument("--overrides", default="", help="the run's recipe overrides as JSON (default: none)")
    p.add_argument("--train-list", default="", help="the run's train list (index/train.lst): the audit's fingerprint")
    p.add_argument("--val-list", default="", help="the run's val list (index/val.lst): the audit's fingerprint")
    p.add_argument("--run", default="", help="the run's name, for the title")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(func=cmd_report)
