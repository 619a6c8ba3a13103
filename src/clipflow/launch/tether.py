"""A launcher's processes end with it, even when it is killed (SIGKILL) and cannot stop them itself.

Linux sends a process the signal it asked for with ``prctl(PR_SET_PDEATHSIG)`` when the thread that started it
ends. The launcher starts every process it runs here (a local role, the ssh client of a remote one, the srun of
a Slurm step) through :func:`tethered_argv`: a bare Python (isolated, without site: a few milliseconds) that asks
for SIGTERM at the launcher's death, checks that its parent is still the launcher (had the launcher died before
the request took hold, it exits at once, 143), and execs the command, which keeps the request (Linux drops it
only for a set-user-ID program). That SIGTERM is the one the launcher's own teardown sends first: clipflow's
scheduler tells every node to stop (ABORT), a server stops, a training worker stops after its step. A remote
role ends as well: its ssh client ends, its stdin closes, and the role's supervisor on the host stops it
(:mod:`clipflow.launch.remote_exec`); an srun passes the SIGTERM on to its step's tasks. What a role would
survive (one that ignores SIGTERM, or children it started in its own process group) ends by the heartbeat
timeout where it is clipflow's (the scheduler gone), as before.

The locale Python sets for itself when started with the C locale (PEP 538, LC_CTYPE) is put back as the
launcher gave it, so the command sees the environment it was given. Where there is no prctl (not Linux) the
command runs as it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

PR_SET_PDEATHSIG = 1
CANNOT_EXEC = 127  # as a shell exits for a command it cannot run

_CODE = f"""\
import ctypes, os, signal, sys
pid, ctype, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM, 0, 0, 0) == 0 and os.getppid() != pid:
    os._exit(128 + signal.SIGTERM)
if ctype:
    os.environ["LC_CTYPE"] = ctype[1:]
else:
    os.environ.pop("LC_CTYPE", None)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    print(f"clipflow launch: cannot start {{argv[0]}}: {{exc.strerror or exc}}", file=sys.stderr, flush=True)
    os._exit({CANNOT_EXEC})
"""


def tethered_argv(argv: Sequence[str], env: Mapping[str, str], python: str = sys.executable) -> list[str]:
    """``argv``, run by ``python`` so that it gets SIGTERM when this process's current thread ends (the launcher's
    main thread, which starts the roles); ``env`` is the environment it is started with. ``argv`` as it is where
    the kernel has no PR_SET_PDEATHSIG."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    ctype = env.get("LC_CTYPE")
    return [python, "-I", "-S", "-c", _CODE, str(os.getpid()), "" if ctype is None else f"={ctype}", *argv]
