"""`python -m clipflow ...`: one subcommand per stage; the workflow's rules call these.

Each module here registers one command group's subcommands next to their handlers; a handler parses, calls one
function of the package that owns the work, and prints. Defaults that config.yaml also sets come from its schema
(:func:`clipflow.schemas.config_defaults`). Failures print one line and exit with their kind's status
(:mod:`clipflow.errors`): ``clipflow: error: ...`` (2) for what a user can fix, ``clipflow: communication
failure: ...`` (76) for a broken exchange between the job's processes. When the reader of the output goes
away (``clipflow data frames ... | head -1``), the command ends quietly with 141, as a Unix tool killed by
SIGPIPE does in the shell's eyes (128 + 13).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys

from clipflow.cli import cluster, collect, data, evaluate, models, predict, ps, report, status, train
from clipflow.cli.args import Parser
from clipflow.errors import FAILURES

GROUPS = (cluster, data, train, collect, ps, evaluate, predict, status, report, models)  # the order of --help


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="clipflow", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from clipflow.environment import read_env, unknown_variables
    from clipflow.host_log import start_from_env

    args = build_parser().parse_args(argv)
    try:
        for warning in unknown_variables():  # a misspelt CLIPFLOW_* setting named, not ignored without a word
            print(f"clipflow: warning: {warning}", file=sys.stderr)
        read_env()  # every CLIPFLOW_* setting checked once, before any work
        start_from_env()  # a role started by the launcher keeps its own log on its host
        status = args.func(args)
        sys.stdout.flush()  # a reader gone before the last lines is met here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise  # another pipe (a child's stdin): a bug to see, not a reader that had enough
        return quiet_after_closed_pipe()
    except FAILURES as exc:
        print(f"clipflow: {exc.label}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_status
    except KeyboardInterrupt:
        print("clipflow: interrupted", file=sys.stderr)
        return 130


CLOSED_PIPE_STATUS = 128 + signal.SIGPIPE  # 141: what a shell reports for `seq 1000000 | head -1`'s seq


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports POLLERR for its writer then)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no stdout, or one without a file descriptor
        return False


def quiet_after_closed_pipe() -> int:
    """Points stdout at /dev/null, so that nothing left in its buffer raises again at exit, and gives the
    status of a Unix tool ended by SIGPIPE: a reader that stops early (head) is no error to report, yet a
    caller with ``set -o pipefail`` sees the output was cut short, as it does for seq or cat."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE_STATUS
