"""No import cycle between two files of Riverbeam, function-local imports included.

``lint-imports`` (``tests/run``) checks the layers between packages; this test names the
files of any cycle in pytest's output, and counts an import hidden inside a function, which
is still a cycle however late it runs. Imports under ``TYPE_CHECKING`` never run and do not
count.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import grimp

PACKAGES = ("bot", "sandbox", "skills")
ROOT = Path(__file__).resolve().parents[2]


def _cycles(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    return sorted(
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if graph.chain_exists(importer=imported, imported=importer)
    )


def test_no_import_cycle_between_files() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)

    assert _cycles(graph) == []


def test_a_cycle_hidden_inside_a_function_is_found() -> None:
    # The check above must be able to fail: two modules of the real graph made to import
    # each other, as a function-local import back would.
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    graph.add_import(importer="bot.core.errors", imported="bot.jobs.tasks")

    assert ("bot.core.errors", "bot.jobs.tasks") in _cycles(graph)


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [
        contract["layers"]
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["id"] == "layers"
    ]
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in layers]


def _pictured_layers() -> list[str]:
    page = (ROOT / "docs" / "architecture.md").read_text()
    picture = page.split("## The layers", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    # Each line: the layer's modules, then two or more spaces, then what it is.
    return [re.split(r"\s{2,}", line.strip(), maxsplit=1)[0] for line in picture.splitlines()]


def test_the_architecture_page_pictures_the_layers_contract() -> None:
    assert _pictured_layers() == _contract_layers()


def test_every_module_the_architecture_page_names_exists() -> None:
    # The last section names the old paths on purpose.
    page = (ROOT / "docs" / "architecture.md").read_text().split("## What the restructuring")[0]
    page = re.sub(r"\]\([^)]*\)", "]", page)  # link targets are pages, not modules
    named = set(re.findall(r"\b((?:bot|sandbox)(?:\.[a-z_]+)+(?:\.[A-Z]\w*(?:\.\w+)?)?)", page))
    missing = []
    for name in sorted(named):
        parts = name.split(".")
        # The longest importable prefix, then attributes down the rest.
        for cut in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                found = getattr(found, attribute, None)
            if found is None:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert len(named) > 20 and missing == []


def _contract(contract_id: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (found,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == contract_id]
    return dict(found)


def _bot_packages() -> set[str]:
    return {f"bot.{path.stem}" for path in (ROOT / "bot").iterdir() if _is_module(path)}


def _is_module(path: Path) -> bool:
    if path.name.startswith("__"):
        return False
    return (path / "__init__.py").exists() or (path.suffix == ".py")


def test_the_leaf_and_the_container_code_are_forbidden_every_other_package_of_bot() -> None:
    # Written out by hand in pyproject.toml; a package added to bot must be added there too.
    others = _bot_packages() - {"bot.core"}
    for contract_id in ("core-is-a-leaf", "inside-not-host"):
        forbidden = set(_contract(contract_id)["forbidden_modules"])
        assert others - forbidden == set(), contract_id


def test_the_bot_layers_are_the_global_layers_seen_inside_bot() -> None:
    inside_bot = [
        " | ".join(
            part.removeprefix("bot.") for part in layer.split(" | ") if part.startswith("bot.")
        )
        for layer in _contract_layers()
    ]
    assert [layer for layer in inside_bot if layer] == _contract("bot-layers")["layers"]
