"""The fenced blocks of the documentation, each with its page, line and the marker comment
just before it (blank lines between are allowed), so each can be checked by a test.

A marker is an HTML comment, invisible when the page is rendered::

    <!-- not-run: needs a container registry -->      cannot run here; says why
    <!-- figure -->                                   a diagram or a layout, not a sample
    <!-- output-of: riverbeam jobs follow <job-id> --> the output of that command
    <!-- schema: bot.service.schemas:JobView -->          a JSON document of that pydantic model
    <!-- result-of: list_tree {"path": ""} -->        what that sandbox tool returns
    <!-- check: NAME -->                              one of CHECK_NAMES, below

The named checks: ``fragment`` (Python that leaves names to the reader: its imports,
calls and classes are checked against the code), ``synopsis`` (usage lines against
``--help``), ``job-states``, ``error-classes``, ``skill-file``, ``model-request`` (the body
the model client sends), ``summary-webhook`` (what a scheduled run posts), ``ci-workflow`` (a
pipeline's YAML parses and its riverbeam commands exist), ``push-result``
and ``metric-names`` (against the live stack).

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
# The named checks: tests/docs/test_samples.py runs these, ...
OFFLINE_CHECKS = frozenset(
    {
        "fragment",
        "job-states",
        "error-classes",
        "synopsis",
        "skill-file",
        "model-request",
        "summary-webhook",
        "ci-workflow",
    }
)
# ... and tests/docs/test_commands.py these, against the running stack.
LIVE_CHECKS = frozenset({"push-result", "metric-names"})
CHECK_NAMES = OFFLINE_CHECKS | LIVE_CHECKS
SHELL = frozenset({"sh", "console", ""})


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


def runner(block: Block) -> str | None:
    """What checks ``block``: a marker's kind, a check's name, or its language's runner
    (``python``, ``toml``, ``shell``); None when nothing does."""
    if block.marker in ("not-run", "figure"):
        return None
    if block.marker == "check":
        return block.argument if block.argument in CHECK_NAMES else None
    if block.marker is not None:
        return block.marker
    return {"python": "python", "toml": "toml"}.get(
        block.lang, "shell" if block.lang in SHELL else None
    )


def unchecked(found: list[Block]) -> list[str]:
    """The blocks nothing checks and no marker excuses (a not-run marker must say why)."""
    return [
        f"{block.id} ({block.lang or 'no language'})"
        for block in found
        if runner(block) is None
        and not (block.marker == "figure" or (block.marker == "not-run" and block.argument))
    ]
