"""The import contracts have no way around them (issue 29 item 5).

Two ways around them were found, each tried here on a copy of the tree: a package root's lazy
names (``from bot import RiverBeam`` in in-container code, which the graph saw as an import of
``bot`` and nothing more), and a module loaded by name (``importlib.import_module``, which no
graph sees). The roots now load their names by import statements and Riverbeam's own code may
not import them (the ``no-root-imports`` contract); loading by name is left to one function,
``bot.core.factories.load_factory``, and the scan below fails on any other.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.stack import PROJECT_ROOT, clean_environment

# What lint-imports reads (its root packages) and what the scan reads (all but the tests).
COPIED = ("bot", "sandbox", "skills", "harness", "bench", "tests")
SCANNED = ("bot", "sandbox", "skills", "harness", "bench")
# Loading a module by name: importlib's function, the builtin, and loading from a spec.
DYNAMIC = {"import_module", "__import__", "module_from_spec", "exec_module", "load_module"}
# The same, called in a program written as a string (a script for another interpreter).
DYNAMIC_IN_TEXT = re.compile(r"\b(" + "|".join(sorted(DYNAMIC)) + r")\s*\(")
THE_LOADER = [("bot/core/factories.py", "import_module")]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def dynamic_imports(root: Path) -> list[tuple[str, str, int]]:
    """Each use of a name of ``DYNAMIC`` in the scanned packages: (file, name, line)."""
    found = []
    for package in SCANNED:
        for path in sorted((root / package).rglob("*.py")):
            shown = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=shown)):
                for name in _dynamic_names(node):
                    found.append((shown, name, getattr(node, "lineno", 0)))
    return found


def _dynamic_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Attribute):
        names = [node.attr]
    elif isinstance(node, ast.Name):
        names = [node.id]
    elif isinstance(node, ast.alias):
        names = [node.name.rpartition(".")[2]]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        names = DYNAMIC_IN_TEXT.findall(node.value)
    else:
        names = []
    return [name for name in names if name in DYNAMIC]


def _loaders(found: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
    return [(path, name) for path, name, _ in found]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what lint-imports and the scan read, to be broken on purpose."""
    for package in COPIED:
        shutil.copytree(
            PROJECT_ROOT / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    shutil.copy(PROJECT_ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    chosen = [argument for contract in contracts for argument in ("--contract", contract)]
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *chosen],
        cwd=root,
        env={**clean_environment(), "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _add_line(path: Path, line: str) -> None:
    """``line`` after ``from __future__ import annotations``, where imports go."""
    future = "from __future__ import annotations\n"
    text = path.read_text()
    assert future in text
    path.write_text(text.replace(future, f"{future}\n{line}\n", 1))


def test_nothing_loads_a_module_by_name_but_the_one_loader() -> None:
    found = dynamic_imports(PROJECT_ROOT)

    assert _loaders(found) == THE_LOADER, found


def test_the_unmodified_copy_keeps_every_contract_and_has_one_loader(tree: Path) -> None:
    ran = lint_imports(tree)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "0 broken" in ran.stdout
    assert _loaders(dynamic_imports(tree)) == THE_LOADER


def test_container_code_importing_a_root_name_breaks_the_contracts(tree: Path) -> None:
    _add_line(tree / "sandbox" / "inside" / "jail.py", "from bot import RiverBeam")

    for contract in ("no-root-imports", "inside-not-host", "layers", "tool-server-lean"):
        ran = lint_imports(tree, contract)
        assert ran.returncode == 1, (contract, ran.stdout + ran.stderr)
        # The chain runs through the root to what it loads: the root hides nothing now.
        assert "sandbox.inside.jail -> bot (l." in ran.stdout, contract


def test_core_loading_the_store_by_name_fails_the_scan(tree: Path) -> None:
    cron = tree / "bot" / "core" / "cron.py"
    _add_line(cron, 'import importlib\n\nimportlib.import_module("bot.store.store")')

    found = dynamic_imports(tree)

    assert ("bot/core/cron.py", "import_module") in _loaders(found)
    assert _loaders(found) != THE_LOADER


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("from importlib import import_module as load", "import_module"),
        ('store = __import__("bot.store.store")', "__import__"),
        (
            "import importlib.util\nspec = importlib.util.find_spec('bot')\n"
            "importlib.util.module_from_spec(spec)",
            "module_from_spec",
        ),
        ("PROBE = 'import importlib; importlib.import_module(name)'", "import_module"),
    ],
)
def test_each_way_of_loading_by_name_is_found(tree: Path, line: str, name: str) -> None:
    _add_line(tree / "sandbox" / "inside" / "jail.py", line)

    assert ("sandbox/inside/jail.py", name) in _loaders(dynamic_imports(tree))
