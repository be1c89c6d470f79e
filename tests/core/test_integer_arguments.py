"""Every integer argument of every tool the host checks (the nine sandbox tools, the consume
tools, review_change): JSON has one number type and JSON Schema counts ``2.0`` as an
integer, so the check hands the tool an ``int`` for it, at whatever depth it sits; a number
that is not an integer is BEM-090. The table below must name every integer argument the
specs declare, so a new one fails here until it is covered."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bot.agents.consume.get_page import GetPageTool
from bot.agents.consume.search import SearchTool
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec, validate_arguments
from bot.jobs.host_tools.review import ReviewChangeTool, ReviewCollector
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.tool_specs import TOOL_SPECS

FINDING = {"path": "docs/a.md", "severity": "minor", "note": "typo"}
# (tool, where the integer sits) -> valid arguments with 2.0 there.
CASES: dict[tuple[str, str], dict[str, Any]] = {
    ("read_file", "start_line"): {"path": "a.md", "start_line": 2.0},
    ("read_file", "limit"): {"path": "a.md", "limit": 2.0},
    ("git_log", "limit"): {"limit": 2.0},
    ("list_tree", "offset"): {"offset": 2.0},
    ("search", "limit"): {"query": "install", "limit": 2.0},
    ("get_page", "start_line"): {"path": "a.md", "start_line": 2.0},
    ("review_change", "findings/*/line"): {
        "verdict": "approve",
        "summary": "ok",
        "findings": [FINDING | {"line": 2.0}],
    },
}


def _specs(tmp_path: Path) -> dict[str, ToolSpec]:
    root = SandboxRoot(tmp_path)
    host = [SearchTool(root), GetPageTool(root), ReviewChangeTool(ReviewCollector(), root)]
    return dict(TOOL_SPECS) | {tool.spec().name: tool.spec() for tool in host}


def _integer_paths(schema: Mapping[str, Any], at: str = "") -> Iterator[str]:
    kinds = schema.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        yield at
    for name, child in schema.get("properties", {}).items():
        yield from _integer_paths(child, f"{at}/{name}" if at else name)
    if isinstance(schema.get("items"), Mapping):
        yield from _integer_paths(schema["items"], f"{at}/*")


def _at(value: Any, path: str) -> Any:
    for part in path.split("/"):
        value = value[0] if part == "*" else value[part]
    return value


def test_the_table_covers_every_integer_argument_of_every_tool(tmp_path: Path) -> None:
    declared = {
        (name, path)
        for name, spec in _specs(tmp_path).items()
        for path in _integer_paths(spec.parameters)
    }
    assert declared == set(CASES)


@pytest.mark.parametrize(("tool", "path"), sorted(CASES))
def test_an_integer_written_as_a_float_reaches_the_tool_as_an_int(
    tmp_path: Path, tool: str, path: str
) -> None:
    checked = validate_arguments(_specs(tmp_path)[tool], CASES[tool, path])
    value = _at(checked, path)
    assert type(value) is int and value == 2


@pytest.mark.parametrize("bad", [2.5, True, float("nan"), float("inf"), -2.0, "2"])
@pytest.mark.parametrize(("tool", "path"), sorted(CASES))
def test_a_number_that_is_not_an_integer_is_bem_090(
    tmp_path: Path, tool: str, path: str, bad: object
) -> None:
    args = _replaced(CASES[tool, path], path.split("/"), bad)
    with pytest.raises(BeamError) as caught:
        validate_arguments(_specs(tmp_path)[tool], args)
    assert caught.value.code == "BEM-090"


def _replaced(value: Any, parts: list[str], new: object) -> Any:
    if not parts:
        return new
    head, rest = parts[0], parts[1:]
    if head == "*":
        return [_replaced(value[0], rest, new)]
    return {**value, head: _replaced(value[head], rest, new)}
