"""Each module basename and each top-level class name is said once in bot, sandbox and skills.

Two ``changes.py`` or two ``Decision`` classes read the same in a traceback, a log line, an
import or a search, and are easy to take for one another. There is no exception list: a name
that two places need is two names. ``__init__`` and ``__main__`` are the only basenames that
repeat by nature. Private classes count too, as they show up in tracebacks all the same.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "sandbox", "skills")
SHARED_BASENAMES = frozenset({"__init__", "__main__"})


def said_twice(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """One line per basename or class name defined in more than one place, sorted."""
    modules: dict[str, list[str]] = defaultdict(list)
    classes: dict[str, list[str]] = defaultdict(list)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if path.stem not in SHARED_BASENAMES:
                modules[path.stem].append(where)
            for node in ast.parse(path.read_bytes(), where).body:
                if isinstance(node, ast.ClassDef):
                    classes[node.name].append(f"{where}:{node.lineno}")
    return sorted(
        [f"module {name}: {', '.join(at)}" for name, at in modules.items() if len(at) > 1]
        + [f"class {name}: {', '.join(at)}" for name, at in classes.items() if len(at) > 1]
    )


def test_no_module_basename_or_class_name_is_said_twice() -> None:
    assert said_twice(ROOT) == []


def test_a_name_said_twice_is_found(tmp_path: Path) -> None:
    # The check above must be able to fail: a tree with a repeated basename, a repeated
    # class (one of them private, one in a package's __init__) and the names that may repeat.
    files = {
        "bot/__init__.py": "class Decision: ...\n",
        "bot/jobs/__init__.py": "",
        "bot/jobs/__main__.py": "",
        "bot/jobs/changes.py": "class _Cursor: ...\n\n\ndef f():\n    class Local: ...\n",
        "bot/runner/__init__.py": "",
        "bot/runner/state.py": "class Decision: ...\n\n\nclass Local: ...\n",
        "sandbox/__main__.py": "",
        "sandbox/changes.py": "class _Cursor: ...\n",
        "skills/loader.py": "class Skill: ...\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    assert said_twice(tmp_path) == [
        "class Decision: bot/__init__.py:1, bot/runner/state.py:1",
        "class _Cursor: bot/jobs/changes.py:1, sandbox/changes.py:1",
        "module changes: bot/jobs/changes.py, sandbox/changes.py",
    ]
