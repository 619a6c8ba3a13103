"""`clipflow ps role|keys`: a scheduler or server process of the parameter server, and its CURVE keys."""

from __future__ import annotations

import argparse


def cmd_role(a: argparse.Namespace) -> int:
    from clipflow.ps import run_role

    return run_role()


def cmd_keys(a: argparse.Namespace) -> int:
    from clipflow.ps.security import make_keys

    print(f"CURVE keys in {make_keys(a.dir)}: copy the folder to every node, set CLIPFLOW_PS_KEYS to it")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    ps = sub.add_parser("ps", help="parameter server").add_subparsers(dest="action", required=True)
    p = ps.add_parser("role", help="run the scheduler or a server, as DMLC_ROLE says")
    p.set_defaults(func=cmd_role)
    p = ps.add_parser("keys", help="make the CURVE key folder of a job")
    p.add_argument("dir")
    p.set_defaults(func=cmd_keys)
