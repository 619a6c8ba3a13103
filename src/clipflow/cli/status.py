"""`clipflow status RUN`: where a run stands."""

from __future__ import annotations

import argparse


def cmd_status(a: argparse.Namespace) -> int:
    from clipflow.evaluate.status import run_status

    status = run_status(a.results, a.run)
    print(status.as_json() if a.json else "\n".join(status.lines()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="where a run stands: epoch, last checkpoint, throughput, ETA")
    p.add_argument("run", help="the run's name (config run:), a folder of --results")
    p.add_argument("--results", default="results", help="the folder holding the runs (default: results)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.set_defaults(func=cmd_status)
