"""The fenced blocks of the documentation, each with its page, line and the marker comment
just before it (blank lines between are allowed), so each can be checked by a test.

A marker is an HTML comment, invisible when the page is rendered::

    <!-- not-run: needs a container registry -->      cannot run here; says why
    <!-- figure -->                                   a diagram or a layout, not a sample
    <!-- output-of: riverbeam jobs follow <job-id> --> the output of that command
    <!-- schema: bot.api.schemas:JobView -->          a JSON document of that pydantic model
    <!-- result-of: list_tree {"path": ""} -->        what that sandbox tool returns
    <!-- check: NAME -->                              a named check of tests/docs/checks.py

A block without a marker is run by its language: ``python`` (the page's Python blocks, in
order, in one namespace), ``toml`` (a configuration), ``sh``/``console`` and unlabelled
blocks (commands against a real stack). Any other block needs a marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w-]*)\s*$")
KINDS = frozenset({"not-run", "figure", "output-of", "schema", "result-of", "check"})


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # the line of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None = None
    argument: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[str]:
    """README.md and every page of docs/, as paths relative to the repository."""
    return ["README.md", *sorted(f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md"))]


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page`` (relative to the repository), in order."""
    return parse(page, (ROOT / page).read_text())


def parse(page: str, text: str) -> list[Block]:
    """The fenced blocks of ``text``, the page ``page``. A marker names a kind of KINDS; an
    unknown one is an error, so a typo cannot hide a block."""
    lines = text.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        indent, ticks, lang = fence.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        body = "\n".join(_dedent(line, indent) for line in lines[index + 1 : end]) + "\n"
        marker, argument = _marker(lines, index, page)
        found.append(Block(page, index + 1, lang, body, marker, argument))
        index = end + 1
    return found


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def _marker(lines: list[str], fence: int, page: str) -> tuple[str | None, str]:
    above = fence - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    if above < 0:
        return None, ""
    found = MARKER.match(lines[above].strip())
    if found is None:
        return None, ""
    kind, argument = found.group(1), found.group(2) or ""
    if kind not in KINDS:
        raise ValueError(f"{page}:{above + 1}: unknown marker {kind!r}; one of {sorted(KINDS)}")
    return kind, argument


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]
