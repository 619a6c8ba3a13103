"""`python -m clipflow ...`: one subcommand per stage; the workflow's rules call these.

Each module here registers one command group's subcommands next to their handlers; a handler parses, calls one
function of the package that owns the work, and prints. Defaults that config.yaml also sets come from its schema
(:func:`clipflow.schemas.config_defaults`). Failures print one line and exit with their kind's status
(:mod:`clipflow.errors`): ``clipflow: error: ...`` (2) for what a user can fix, ``clipflow: communication
failure: ...`` (76) for a broken exchange between the job's processes.
"""

from __future__ import annotations

import argparse
import sys

from clipflow.cli import cluster, collect, data, evaluate, models, ps, report, status, train
from clipflow.cli.args import Parser
from clipflow.errors import FAILURES

GROUPS = (cluster, data, train, collect, ps, evaluate, status, report, models)  # the order --help lists them in


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="clipflow", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from clipflow.environment import read_env
    from clipflow.host_log import start_from_env

    args = build_parser().parse_args(argv)
    try:
        read_env()  # every CLIPFLOW_* setting checked once, before any work
        start_from_env()  # a role started by the launcher keeps its own log on its host
        return args.func(args)
    except FAILURES as exc:
        print(f"clipflow: {exc.label}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_status
    except KeyboardInterrupt:
        print("clipflow: interrupted", file=sys.stderr)
        return 130
