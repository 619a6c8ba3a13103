"""Settings from the environment: every ``CLIPFLOW_*`` variable, read here into one typed object.

:data:`VARIABLES` lists them with their defaults and meanings (docs/settings.md's table is that list, and a test keeps
the two equal); :meth:`ClipflowEnv.from_env` reads and checks them all at once, naming a bad one with what it
must be. The rest of clipflow takes these settings from a :class:`ClipflowEnv`, never from ``os.environ``.

The variables other programs define (MXNet's DMLC_*, PS_* and MXNET_*, torchrun's RANK, WORLD_SIZE, MASTER_*,
LOCAL_RANK, Slurm's SLURM_*) are read where they are used, with the readers below
(:func:`int_var`, :func:`float_var`, :func:`required_var`), so their messages have the same form.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir

# -- readers: one variable, checked, or a ClipflowError naming it and what it must be ----------------------------


def optional_var(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def required_var(env: Mapping[str, str], name: str, what: str) -> str:
    value = optional_var(env, name)
    if value is None:
        raise ClipflowError(f"{name} is not set: it must be {what}")
    return value


def int_var(
    env: Mapping[str, str],
    name: str,
    what: str,
    low: int | None = None,
    high: int | None = None,
    default: int | None = None,
) -> int:
    raw = optional_var(env, name)
    if raw is None:
        if default is None:
            raise ClipflowError(f"{name} is not set: it must be {what}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ClipflowError(f"{name} must be {what}; got {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ClipflowError(f"{name} must be {what}; got {raw!r}")
    return value


def float_var(env: Mapping[str, str], name: str, what: str, default: float, zero: bool = False) -> float:
    raw = optional_var(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ClipflowError(f"{name} must be {what}; got {raw!r}") from None
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        raise ClipflowError(f"{name} must be {what}; got {raw!r}")
    return value


def choice_var(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = (optional_var(env, name) or default).lower()
    if value not in choices:
        raise ClipflowError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


# -- the CLIPFLOW_* variables -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variable:
    """One CLIPFLOW_* variable: its name, the :class:`ClipflowEnv` field it fills, its default as docs/settings.md
    shows it, who sets it (``you``, ``launcher`` or ``tests``) and what it means."""

    name: str
    field: str
    default: str
    set_by: str
    meaning: str
    read: Callable[[Mapping[str, str], str], object]


SECURITY_MODES = ("curve", "none", "auto")
DEVICE_KINDS = ("auto", "cpu", "cuda")
DEFAULT_PIECE = 8_000_000  # elements: 32 MB pieces (measured in bench/ps_throughput.py)
DEFAULT_PROGRESS_S = 10.0


def _seconds(what: str, default: float) -> Callable[[Mapping[str, str], str], float]:
    return lambda env, name: float_var(env, name, f"{what}, a number > 0", default)


def _switch(what: str) -> Callable[[Mapping[str, str], str], bool]:
    return lambda env, name: bool(int_var(env, name, f"1 ({what}) or 0", 0, 1, 1))


def _fault_kill(env: Mapping[str, str], name: str) -> tuple[int, int, int] | None:
    value = optional_var(env, name)
    if value is None:
        return None
    parts = value.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        numbers = [int(p) for p in parts] + ([0] if len(parts) == 2 else [])
    except ValueError:
        raise ClipflowError(f"{name}={value!r}: expected rank:epoch[:iteration], e.g. 1:2") from None
    return numbers[0], numbers[1], numbers[2]


def _drop_percent(env: Mapping[str, str], name: str) -> float:
    drop = float_var(env, name, "the percentage of data messages to drop, a number 0-100", 0.0, zero=True)
    if drop > 100:
        raise ClipflowError(f"{name} must be a number 0-100; got {drop:g}")
    return drop


def _grace(env: Mapping[str, str], name: str) -> float:
    raw = optional_var(env, name)
    if raw is None:
        return 10.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ClipflowError(f"{name}={raw!r} must be a number of seconds >= 0")
    return value


def _path(env: Mapping[str, str], name: str) -> Path | None:
    """A path; a leading ``~`` is this host's home (a host with its own disk keeps the job's files there)."""
    value = optional_var(env, name)
    return None if value is None else Path(value).expanduser()


def _folder(env: Mapping[str, str], name: str) -> Path | None:
    """A folder this process writes into (:func:`_path`): not a file, and there or makeable, checked as the
    variable is read (:func:`clipflow.files.check_output_dir`), so that no worker meets it later."""
    path = _path(env, name)
    return None if path is None else check_output_dir(path, name)


VARIABLES = (
    Variable("CLIPFLOW_HEARTBEAT_INTERVAL", "heartbeat_interval", "1", "you",
             "seconds between a node's heartbeats to the scheduler",
             _seconds("seconds between heartbeats", 1.0)),
    Variable("CLIPFLOW_HEARTBEAT_TIMEOUT", "heartbeat_timeout", "30", "launcher",
             "seconds of silence before a node is declared dead (the plan's `cluster.heartbeat_timeout`); larger "
             "than the interval",
             _seconds("seconds of silence before a node is dead", 30.0)),
    Variable("CLIPFLOW_STARTUP_TIMEOUT", "startup_timeout", "120", "you",
             "seconds the nodes wait for all the others to register",
             _seconds("seconds to wait for all nodes to register", 120.0)),
    Variable("CLIPFLOW_PS_SECURITY", "ps_security", "auto", "launcher",
             "`curve`, `none`, or `auto` (CURVE whenever the scheduler is not on loopback)",
             lambda env, name: choice_var(env, name, SECURITY_MODES, "auto")),
    Variable("CLIPFLOW_PS_KEYS", "ps_keys", "", "launcher",
             "the CURVE key folder (`python -m clipflow ps keys DIR`), on every node", _path),
    Variable("CLIPFLOW_PS_INSECURE", "ps_insecure", "0", "you",
             "1: accept `none` security (`cluster.security: none`) with the scheduler or a server beyond loopback: "
             "unencrypted, unauthenticated traffic, and every node warns; refused otherwise",
             lambda env, name: bool(int_var(env, name, "1 (allow security none beyond loopback) or 0", 0, 1, 0))),
    Variable("CLIPFLOW_PS_SHM", "ps_shm", "1", "you",
             "1 / 0: a worker and a server on the same machine pass arrays through shared memory",
             _switch("shared memory between nodes on one machine")),
    Variable("CLIPFLOW_PS_SHM_MIN_BYTES", "ps_shm_min_bytes", "65536", "you",
             "key parts smaller than this many bytes keep TCP",
             lambda env, name: int_var(env, name, "a number of bytes, an integer >= 0", low=0, default=65536)),
    Variable("CLIPFLOW_PS_MALLOC_TUNE", "ps_malloc_tune", "1", "you",
             "1 / 0: glibc keeps large freed buffers (no page faults for every 100 MB received)",
             _switch("tune glibc malloc for large messages")),
    Variable("CLIPFLOW_PS_PIECE", "ps_piece", "8000000", "you",
             "elements per piece of a key split over the servers (32 MB), each summed and returned as soon as "
             "every worker's copy is in; 0: off",
             lambda env, name: int_var(env, name, "elements per piece of a split key, an integer >= 0 (0: off)", 0,
                                       default=DEFAULT_PIECE)),
    Variable("CLIPFLOW_PS_DROP_PERCENT", "ps_drop_percent", "0", "tests",
             "fault injection: drop that share of the data messages a node receives", _drop_percent),
    Variable("CLIPFLOW_PS_DROP_SEED", "ps_drop_seed", "", "tests", "seeds the drops",
             lambda env, name: None if optional_var(env, name) is None else int_var(env, name, "an integer")),
    Variable("CLIPFLOW_DDP_TIMEOUT", "ddp_timeout", "600", "you",
             "seconds a torch.distributed collective may wait for every process",
             _seconds("seconds", 600.0)),
    Variable("CLIPFLOW_DEVICE", "device", "auto", "you",
             "`auto` (a GPU when the host has one), `cpu` or `cuda`",
             lambda env, name: choice_var(env, name, DEVICE_KINDS, "auto")),
    Variable("CLIPFLOW_TORCH_THREADS", "torch_threads", "", "you",
             "torch threads of a worker; default: the CPUs it may run on / workers on that host",
             lambda env, name: None if optional_var(env, name) is None else int_var(
                 env, name, "an integer >= 1 (torch threads of this worker)", low=1)),
    Variable("CLIPFLOW_WORKERS_ON_HOST", "workers_on_host", "1", "launcher",
             "workers the launcher placed on this worker's host",
             lambda env, name: int_var(env, name, "an integer >= 1", low=1, default=1)),
    Variable("CLIPFLOW_NODE_ADDRESS", "node_address", "", "launcher",
             "this worker's address in the plan (gloo's or NCCL's interface is the one holding it)",
             lambda env, name: optional_var(env, name)),
    Variable("CLIPFLOW_HOST_LOG", "host_log", "", "launcher",
             "the log a role keeps on its own host, for `clipflow collect`", _path),
    Variable("CLIPFLOW_REMOTE_GRACE_S", "remote_grace_s", "10", "you",
             "seconds a role started over ssh gets between SIGTERM and SIGKILL when its connection closes",
             _grace),
    Variable("CLIPFLOW_PROGRESS_S", "progress_s", "10", "you",
             "the most seconds between two progress lines of worker 0",
             _seconds("seconds between progress lines", DEFAULT_PROGRESS_S)),
    Variable("CLIPFLOW_NO_PROGRESS", "no_progress", "", "you", "1: no progress bars",
             lambda env, name: optional_var(env, name) == "1"),
    Variable("CLIPFLOW_FAULT_KILL", "fault_kill", "", "tests",
             "`rank:epoch[:iteration]`: that worker SIGKILLs itself there (epoch 1-based, iteration 0-based); "
             "the first launch only, never a restart",
             _fault_kill),
    Variable("CLIPFLOW_SAMPLE_LOG", "sample_log", "", "tests",
             "a folder: every worker appends a line per trained sample after each optimizer step (attempt, epoch, "
             "step, slot, video, weight), to account for every sample of every epoch across restarts and resizes",
             _folder),
    Variable("CLIPFLOW_FAULT_STEP_S", "fault_step_s", "0", "tests",
             "seconds every worker sleeps after each optimizer step: a run that outlasts a time limit on any CPU",
             lambda env, name: float_var(env, name, "seconds to sleep after each step, a number >= 0", 0.0,
                                         zero=True)),
)  # fmt: skip


@dataclass(frozen=True)
class ClipflowEnv:
    """Every CLIPFLOW_* setting of this process, checked (see :data:`VARIABLES`)."""

    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 30.0
    startup_timeout: float = 120.0
    ps_security: str = "auto"
    ps_keys: Path | None = None
    ps_insecure: bool = False
    ps_shm: bool = True
    ps_shm_min_bytes: int = 65536
    ps_malloc_tune: bool = True
    ps_piece: int = DEFAULT_PIECE
    ps_drop_percent: float = 0.0
    ps_drop_seed: int | None = None
    ddp_timeout: float = 600.0
    device: str = "auto"
    torch_threads: int | None = None
    workers_on_host: int = 1
    node_address: str | None = None
    host_log: Path | None = None
    remote_grace_s: float = 10.0
    progress_s: float = DEFAULT_PROGRESS_S
    no_progress: bool = False
    fault_kill: tuple[int, int, int] | None = None
    sample_log: Path | None = None
    fault_step_s: float = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClipflowEnv:
        """Reads every CLIPFLOW_* variable of ``environ`` (default: this process's); raises ClipflowError naming
        the first bad one."""
        env = os.environ if environ is None else environ
        settings = cls(**{v.field: v.read(env, v.name) for v in VARIABLES})
        if settings.heartbeat_timeout <= settings.heartbeat_interval:
            raise ClipflowError(
                f"CLIPFLOW_HEARTBEAT_TIMEOUT ({settings.heartbeat_timeout:g} s) must be larger than "
                f"CLIPFLOW_HEARTBEAT_INTERVAL ({settings.heartbeat_interval:g} s)"
            )
        return settings


NAMES = {v.field: v.name for v in VARIABLES}  # field -> variable, for those who set one (the launcher)


def read_env(environ: Mapping[str, str] | None = None) -> ClipflowEnv:
    return ClipflowEnv.from_env(environ)


PREFIX = "CLIPFLOW_"


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for every ``CLIPFLOW_*`` variable of ``environ`` (default: this process's) that is none of
    :data:`VARIABLES`, naming the closest one: a misspelt setting would otherwise be ignored without a word."""
    env = os.environ if environ is None else environ
    known = [v.name for v in VARIABLES]
    words = [name.removeprefix(PREFIX) for name in known]  # compared without the prefix they all share
    warnings = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in known):
        close = difflib.get_close_matches(name.removeprefix(PREFIX), words, n=1)
        hint = f"did you mean {PREFIX}{close[0]}?" if close else "docs/settings.md lists the settings"
        warnings.append(f"{name} is not a clipflow setting, so it is ignored; {hint}")
    return warnings
