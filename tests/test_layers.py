"""The package's rooms are layered: a module imports only from its own room or from rooms below it, so no
import arrow runs upward and a room can be read (and tested) with only what lies beneath it.

The order, lowest first (docs/architecture.md draws it):

0. the base modules beside the rooms: errors (with every exit code), files, textfile, values, checksums,
   environment, made, host_log, schemas, workflow_settings;
1. ``ps/``, the parameter server;
2. ``data/``;
3. ``models/`` (with the scoring loop that training's validation and evaluation share);
4. ``recipe``;
5. ``hosts/``: the plan and hosts file, ssh and the files on a host, sync, ports, Slurm allocations;
6. ``launch/``: starting, watching, signalling and tearing down the processes on the hosts;
7. ``train/``: the training job, its restarts and its worker;
8. ``cluster/`` (checks, links, prediction, staging), ``collect/``, ``evaluate/``, ``report/``: none imports another;
9. ``workflow_checks``;
10. ``cli/``; 11. ``__main__``.
"""

import ast
from pathlib import Path

import pytest

LAYERS = [
    {"__init__", "errors", "files", "textfile", "values", "checksums", "environment", "made", "host_log",
     "schemas", "workflow_settings", "jsonl", "yaml12", "safe_load", "saving"},
    {"ps"},
    {"data"},
    {"models"},
    {"recipe"},
    {"hosts"},
    {"launch"},
    {"train"},
    {"cluster", "collect", "evaluate", "report"},
    {"workflow_checks", "config_entry"},
    {"cli"},
    {"__main__"},
]  # fmt: skip
SHARED = LAYERS[0]  # single modules, not rooms: they may import each other (Python refuses a cycle at import)
LAYER = {room: n for n, rooms in enumerate(LAYERS) for room in rooms}
SRC = Path(__file__).resolve().parents[1] / "src" / "clipflow"


def room_of(path: Path) -> str:
    """The room of a file under src/clipflow: its top folder, or a top-level module's own name."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else path.stem


def imported_rooms(path: Path) -> set[tuple[str, int]]:
    """(room, line) of every clipflow import in ``path``, at any depth (imports inside functions count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "clipflow" else [f"clipflow.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {(n.split(".")[1], node.lineno) for n in names if n.startswith("clipflow.")}
    return found


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_room_has_a_layer():
    rooms = {room_of(p) for p in modules()}
    assert rooms - set(LAYER) == set(), "a new room or base module: give it its layer here"
    assert set(LAYER) - rooms == set(), "a layer names a room that no longer exists"


def test_no_relative_imports():
    """The layering is read from absolute imports; a relative one would slip past it."""
    relative = [f"{p.relative_to(SRC)}:{n.lineno}" for p in modules() for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.ImportFrom) and n.level]  # fmt: skip
    assert relative == []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_downward(path):
    room = room_of(path)
    upward = []
    for other, line in sorted(imported_rooms(path)):
        if other == room or other not in LAYER:
            continue
        below = LAYER[other] < LAYER[room] or (room in SHARED and other in SHARED)
        if not below:
            upward.append(f"line {line}: {room} (layer {LAYER[room]}) imports {other} (layer {LAYER[other]})")
    assert upward == [], f"{path.relative_to(SRC)}: " + "; ".join(upward)


def test_the_recipe_checks_the_workflow_parse_and_a_fresh_launch_import_no_torch():
    """torch (and torchvision: 3 s of CPU together) is imported where a tensor is computed: every video recipe
    checks through torch-free specs, and the modules the Snakefile and the launchers read load without it, so a
    Snakemake parse (every dry run) and a fresh run's train launcher start without torch."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from clipflow.recipe import load_recipe\n"
        "from clipflow.cluster.prediction import shape_overrides\n"
        "import clipflow.workflow_checks, clipflow.train.launch, clipflow.evaluate.job, clipflow.launch.start\n"
        "for name in ('slowfast_tiny_synthetic', 'slowfast_4x16_resnet50_kinetics400', 'r2plus1d_18_kinetics400'):\n"
        "    load_recipe(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout[:2000]
