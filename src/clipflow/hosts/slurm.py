"""Starting the roles inside a Slurm allocation.

Run from ``sbatch`` or ``salloc``, the launcher finds the allocation's nodes in the environment
Slurm sets (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``) and starts each role (scheduler, server,
worker) with one ``srun`` job step on its node. Several roles may share a node, so every step
is started with ``--overlap``.

Values for a role (the DMLC_* variables, the CURVE key folder, anything secret) travel through
the environment: the launcher sets them in the environment of the ``srun`` process and
``--export=ALL`` carries them to the task. They are never put on the srun command line, where
``ps``, ``squeue`` and Slurm's accounting would show them to every user of the cluster.

Before any step starts, :func:`check_slurm_launch` makes sure ``srun`` is there, the launcher runs inside an
allocation, and every node the plan names belongs to it. This module builds the node list and the commands and
reads the environment; it talks to no Slurm controller itself.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from clipflow.errors import ClipflowError

NODELIST_EXAMPLE = "'node[01-03,07],gpu1'"
NOT_IN_ALLOCATION = (
    "not inside a Slurm allocation (SLURM_JOB_ID is not set): run the launcher from sbatch or salloc, "
    "or use --launcher ssh"
)

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_NODE_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class SlurmAllocation:
    """The job the launcher runs in, as Slurm describes it in the environment."""

    job_id: str
    nodes: list[str]  # expanded SLURM_JOB_NODELIST (or SLURM_NODELIST)
    cpus_per_node: int | None  # from SLURM_CPUS_ON_NODE if present


def expand_nodelist(spec: str) -> list[str]:
    """Expand Slurm's hostlist syntax into node names, in the order ``scontrol show hostnames`` gives.

    ``node[01-03,07],gpu[1-2]`` -> node01 node02 node03 node07 gpu1 gpu2; several bracket groups in
    one name combine, the first varying slowest: ``rack[1-2]-n[01-02]`` -> rack1-n01 rack1-n02
    rack2-n01 rack2-n02. Zero padding of a range's start is kept (``n[08-10]`` -> n08 n09 n10).
    """
    if not spec.strip():
        _malformed(spec, "it is empty")
    return [node for item in _split_top_level(spec) for node in _expand_item(spec, item)]


def allocation_from_env(env: Mapping[str, str]) -> SlurmAllocation:
    """The allocation from the variables Slurm sets in a job (pass ``os.environ``)."""
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        raise ClipflowError(NOT_IN_ALLOCATION)
    return SlurmAllocation(job_id=job_id, nodes=_nodes_from_env(env, job_id), cpus_per_node=_cpus_from_env(env))


COMMAND_TIMEOUT_S = 30.0


class SlurmCommandFailed(Exception):
    """A Slurm client command could not be run, or refused (one line: why)."""


def slurm_command(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> str:
    """The output of a Slurm client command (``squeue``, ``scontrol`` ...); :class:`SlurmCommandFailed` saying
    why not (not on PATH, its error, no answer within :data:`COMMAND_TIMEOUT_S`)."""
    shown = " ".join(argv)
    try:
        done = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmCommandFailed(f"{argv[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandFailed(f"`{shown}` did not answer within {COMMAND_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise SlurmCommandFailed(f"`{shown}` failed: {(done.stderr or done.stdout).strip() or done.returncode}")
    return done.stdout


def check_slurm_launch(nodes: Iterable[str], environ: Mapping[str, str] = os.environ) -> SlurmAllocation:
    """Refuses, naming what is wrong, a slurm launch that could not start its steps: ``srun`` missing, no
    allocation, or a node of the plan (``nodes``) outside the allocation. Returns the allocation."""
    if shutil.which("srun", path=environ.get("PATH")) is None:
        raise ClipflowError(
            "the slurm launcher needs srun, which is not on PATH here: run it on a node of the Slurm cluster, with "
            "Slurm's commands on PATH (Debian: slurm-client), or use --launcher ssh"
        )
    allocation = allocation_from_env(environ)
    check_nodes_in_allocation(nodes, allocation)
    return allocation


def check_nodes_in_allocation(nodes: Iterable[str], allocation: SlurmAllocation) -> None:
    """Every node named must be one of the allocation's: else one line with the nodes outside and the way out."""
    wanted = list(dict.fromkeys(nodes))
    outside = [node for node in wanted if node not in allocation.nodes]
    if outside:
        raise ClipflowError(
            f"{len(wanted)} nodes planned ({', '.join(wanted)}) but Slurm job {allocation.job_id} has "
            f"{len(allocation.nodes)} ({', '.join(allocation.nodes)}); {', '.join(outside)} "
            f"{'is' if len(outside) == 1 else 'are'} not in it: ask for them (sbatch --nodes={len(wanted)}), or "
            "plan on the allocation's own nodes (no --hosts)"
        )


def srun_argv(node: str, argv: Sequence[str], job_name: str = "clipflow") -> list[str]:
    """The command that starts `argv` as one job step (one task) on `node` of the current allocation.

    ``--overlap`` lets several roles share a node; ``--kill-on-bad-exit=1`` ends the step when its
    task fails. Environment values are never part of this command: set them in the environment of
    the srun process (``subprocess.Popen(srun_argv(...), env=...)``) and ``--export=ALL`` carries
    them to the task, so secrets stay out of ``ps`` and Slurm's records.
    """
    if not _NODE_NAME.fullmatch(node):
        raise ClipflowError(
            f"srun: node {node!r} is not one node name; expected a single name from the allocation such as 'gpu01'"
        )
    if not argv:
        raise ClipflowError(f"srun: no command given for node {node}; expected the role's command line")
    return [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--overlap",
        "--kill-on-bad-exit=1",
        "--export=ALL",
        f"--job-name={job_name}",
        "--unbuffered",
        *argv,
    ]


def _nodes_from_env(env: Mapping[str, str], job_id: str) -> list[str]:
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        value = env.get(var)
        if value is not None:
            try:
                return expand_nodelist(value)
            except ClipflowError as exc:
                raise ClipflowError(f"{var}={value!r} from Slurm cannot be read: {exc}") from None
    raise ClipflowError(
        f"SLURM_JOB_ID={job_id} is set but SLURM_JOB_NODELIST (and SLURM_NODELIST) is not; expected the "
        "allocation's node list, which Slurm sets in every job: run the launcher from sbatch or salloc"
    )


def _cpus_from_env(env: Mapping[str, str]) -> int | None:
    value = env.get("SLURM_CPUS_ON_NODE")
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise ClipflowError(f"SLURM_CPUS_ON_NODE={value!r} is not a whole number >= 1, as Slurm sets it")
    return int(value)


def _malformed(spec: str, problem: str) -> NoReturn:
    raise ClipflowError(f"Slurm node list {spec!r}: {problem}; expected a hostlist such as {NODELIST_EXAMPLE}")


def _split_top_level(spec: str) -> list[str]:
    """Split at the commas outside brackets; checks that brackets balance and do not nest."""
    items, current, depth = [], "", 0
    for char in spec:
        if char == "[":
            if depth:
                _malformed(spec, "'[' inside brackets")
            depth = 1
        elif char == "]":
            if not depth:
                _malformed(spec, "']' without '['")
            depth = 0
        if char == "," and not depth:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        _malformed(spec, "'[' is not closed by ']'")
    items.append(current)
    for item in items:
        if not item.strip():
            _malformed(spec, "an empty name between commas")
    return [item.strip() for item in items]


def _expand_item(spec: str, item: str) -> list[str]:
    """One name with bracket groups -> the cartesian product of its parts, first group slowest."""
    parts: list[list[str]] = []
    for text in re.split(r"(\[[^\]]*\])", item):
        if text.startswith("["):
            parts.append(_expand_ranges(spec, text[1:-1]))
        elif text:
            parts.append([text])
    return ["".join(combo) for combo in itertools.product(*parts)]


def _expand_ranges(spec: str, body: str) -> list[str]:
    """``01-03,07`` -> 01 02 03 07; the width of each range's start is kept."""
    if not body:
        _malformed(spec, "empty brackets '[]'")
    numbers = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if not match:
            _malformed(spec, f"{part!r} in brackets is not a number or a range a-b")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            _malformed(spec, f"the range {part!r} runs backwards")
        numbers += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return numbers
