"""A node's heartbeat (clipflow.ps.heartbeat) while it starts: a role whose scheduler never comes ends by itself
with one line naming the scheduler it waited for, the setting that bounded the wait and what to check."""

from __future__ import annotations

import sys
from collections.abc import Callable

from ps_cluster_helpers import Cluster

ROLE_CLI = [sys.executable, "-m", "clipflow", "ps", "role"]


def test_a_starting_role_whose_scheduler_never_comes_ends_naming_what_it_waited_for(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(1, 1, CLIPFLOW_STARTUP_TIMEOUT="1")
    server = cluster.start("server", "server", ROLE_CLI)  # nothing listens on the scheduler's port
    code = server.popen.wait(timeout=60)
    port = cluster.env["DMLC_PS_ROOT_PORT"]
    log = server.stderr()
    assert code in (2, 75), log  # the registration's error or the heartbeat thread's, whichever sees it first
    lines = [line for line in log.splitlines() if "no answer from the scheduler" in line]
    assert len(lines) == 1 and "Traceback" not in log, log
    assert lines[0].endswith(
        f"no answer from the scheduler at 127.0.0.1:{port} within 1 s (CLIPFLOW_STARTUP_TIMEOUT): it is not running "
        "there, or it does not accept this node's security settings (CLIPFLOW_PS_SECURITY=none); every node needs the "
        "same CLIPFLOW_PS_SECURITY and key folder (CLIPFLOW_PS_KEYS)"
    ), lines[0]
