"""The test suite itself: every module stands alone (none imports a test module or conftest.py, so none runs
another's top level or shares its state), and conftest's ``--order`` runs the tests reversed or shuffled."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from helpers import REPO, python_env
from leftover_helpers import MARKER, carrying, end_leftovers

TESTS = Path(__file__).resolve().parent


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source``, at any depth: import and from-import statements (for a relative
    one, its module and each name), and importlib.import_module / __import__ of a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                found.append((node.lineno, node.module))
            if node.level:  # from . import test_x: the names are modules too
                found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return sorted(found)


def forbidden(module: str) -> bool:
    first = module.split(".")[0]
    return first.startswith("test_") or first == "conftest"


def test_the_import_check_finds_every_form() -> None:
    source = (
        "import os, test_a\n"
        "from conftest import python_env\n"
        "from helpers import python_env\n"
        "def f():\n"
        "    from test_b import c\n"
        "    import test_c.sub\n"
        "    return importlib.import_module('test_d'), __import__('conftest')\n"
        "from . import test_e\n"
    )
    found = imported_modules(source)
    assert [name for _, name in found if forbidden(name)] == ["test_a", "conftest", "test_b", "test_c.sub",
                                                              "conftest", "test_d", "test_e"]  # fmt: skip
    assert (1, "os") in found and (3, "helpers") in found


def test_no_module_of_the_suite_imports_a_test_module_or_conftest() -> None:
    offending = [
        f"tests/{path.relative_to(TESTS).as_posix()} line {line}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, name in imported_modules(path.read_text(encoding="utf-8"))
        if forbidden(name)
    ]
    assert offending == [], (
        "a test module must not import another test module or conftest: put helpers in a helper module "
        "(tests/helpers.py, tests/*_helpers.py, a folder's own beside its tests) and fixtures in a conftest.py\n"
        + "\n".join(offending)
    )


def collected(*order: str) -> subprocess.CompletedProcess:
    """The ids that ``pytest --collect-only`` lists for three small modules, in the order given by ``--order``."""
    modules = ["tests/test_packaging.py", "tests/evaluate/test_status.py", "tests/test_host_log.py"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *order, *modules],
        cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def ids(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_order_option_reverses_and_shuffles_the_same_way_for_a_seed() -> None:
    default = ids(collected())
    assert len({i.split("::")[0] for i in default}) == 3 and len(default) >= 6
    assert ids(collected("--order", "default")) == default
    assert ids(collected("--order", "reverse")) == default[::-1]
    shuffled = ids(collected("--order", "shuffle:7"))
    assert shuffled != default and sorted(shuffled) == sorted(default)
    assert ids(collected("--order", "shuffle:7")) == shuffled  # the seed gives the order again
    modules = [i.split("::")[0] for i in shuffled]
    assert len([m for k, m in enumerate(modules) if k == 0 or modules[k - 1] != m]) == 3  # each module in one run
    header = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "--order", "shuffle",
         "tests/test_packaging.py"],
        cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert header.returncode == 0 and "test order: shuffle:" in header.stdout, header.stdout + header.stderr
    bad = collected("--order", "shuffle:x")
    assert bad.returncode == 4
    assert "--order must be default, reverse, shuffle or shuffle:SEED (a whole number); got 'shuffle:x'" in bad.stderr


def test_a_process_left_by_the_session_is_found_by_its_marker_and_killed() -> None:
    token = "suite-check-1"
    left = subprocess.Popen(["sleep", "60"], env={**python_env(), MARKER: token})
    other = subprocess.Popen(["sleep", "60"], env={**python_env(), MARKER: "another-session"})
    try:
        assert carrying(token) == {left.pid: "sleep 60"}
        assert end_leftovers(token, grace_s=0.5) == {left.pid: "sleep 60"}
        assert left.wait(timeout=10) == -9 and other.poll() is None  # killed; the other session's left alone
        assert carrying(token) == {}
    finally:
        for proc in (left, other):
            proc.kill()
            proc.wait()
