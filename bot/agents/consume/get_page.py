"""``get_page``: one docs page of a job's tree, with its title, for answers that cite it.

The page is read through the path jail like every other file. A directory stands for its
index page (``docs/install/`` is ``docs/install/index.md`` or its README), which is how docs
sites link to sections. The title is the page's own: a ``title`` in its front matter, else
its first heading (Markdown ``#`` or underlined, reStructuredText, HTML ``<h1>``/``<title>``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from pydantic import JsonValue

from bot.agents.tree_text import missing, split_lines
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, json_params, validate_arguments
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import decode_text

__all__ = ["GetPageTool", "page_title"]

MAX_PAGE_CHARS = 60_000
MAX_TITLE_CHARS = 200
INDEX_NAMES = ("index.md", "_index.md", "README.md", "index.rst", "README.rst", "index.html")
# Front matter longer than this is not front matter but a page that starts with a rule.
_FRONT_MATTER_LINES = 100

_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")
_UNDERLINE = re.compile(r"^ {0,3}([=\-~^*#+`'\".:_])\1{2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HTML_TITLE = re.compile(r"<(h1|title)\b[^>]*>(.*?)</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_FRONT_TITLE = re.compile(r"""^title[ \t]*[:=][ \t]*(["']?)(.+?)\1[ \t]*$""")


class GetPageTool:
    """The ``get_page`` host tool, bound to one job's tree."""

    def __init__(self, root: SandboxRoot) -> None:
        self._root = root

    def __repr__(self) -> str:
        return f"GetPageTool({self._root!r})"

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="get_page",
            description=(
                "Read one documentation page by its path, to answer from it and cite it. "
                "Returns the page's 'title' (from its front matter or first heading; null "
                "when it has none) and its 'text' with 'start_line', 'end_line' and "
                f"'total_lines'; at most {MAX_PAGE_CHARS} characters per call. When "
                "'truncated' is true, call again with start_line=end_line+1 for the rest, or "
                "with the line number a search hit gave. A directory path returns its index "
                "page (index.md, README.md, ...). Cite the returned 'path'. Errors: BEM-100 "
                "when the page does not exist or is not text; BEM-305 for a file over the size "
                "cap; BEM-300..304 for a path the jail refuses."
            ),
            parameters=json_params(
                {
                    "path": {
                        "type": "string",
                        "maxLength": 1024,
                        "description": "The page, like 'docs/install.md', as search returned it.",
                    },
                    "start_line": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to return (1-based); default 1.",
                    },
                },
                ["path"],
            ),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        checked = validate_arguments(self.spec(), args)
        start = checked.get("start_line", 1)
        assert isinstance(start, int)  # the schema says so
        result: JsonValue = await asyncio.to_thread(self.get_page, str(checked["path"]), start)
        return result

    def get_page(self, path: str, start_line: int = 1) -> dict[str, Any]:
        """The page, synchronously: a JSON object for the model."""
        try:
            page = self._page_path(self._root.normalize(path))
            data = self._root.read_bytes(page)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise missing("get_page", error) from None
        text = decode_text(data)
        if text is None:
            raise BeamError(
                "BEM-100",
                f"get_page: {page!r} is not a text page (it holds binary data or is not "
                "UTF-8); search for a text page instead",
            )
        return {"path": page, "title": page_title(text), **_window(text, start_line)}

    def _page_path(self, path: str) -> str:
        if not self._root.is_dir(path):
            return path
        for name in INDEX_NAMES:
            candidate = f"{path}/{name}" if path else name
            if self._root.exists(candidate) and not self._root.is_dir(candidate):
                return candidate
        shown = repr(path) if path else "the repository root"
        raise BeamError(
            "BEM-100",
            f"get_page: {shown} is a directory without an index page "
            f"({', '.join(INDEX_NAMES)}); search for the page you need",
        )


def page_title(text: str) -> str | None:
    """The page's title: front matter first, then its first heading; None without one."""
    lines = split_lines(text)
    title, body = _front_matter(lines)
    if title is None:
        title = _first_heading(lines[body:])
    if title is None:
        return None
    title = " ".join(_TAG.sub("", title).split())
    return title[:MAX_TITLE_CHARS] or None


def _front_matter(lines: list[str]) -> tuple[str | None, int]:
    """The ``title`` of YAML (---) or TOML (+++) front matter, as Jekyll, Hugo and MkDocs
    write it, and the index of the first line after the front matter (0 without one)."""
    if not lines or lines[0].strip() not in ("---", "+++"):
        return None, 0
    fence = lines[0].strip()
    title = None
    for index, line in enumerate(lines[1:_FRONT_MATTER_LINES], start=1):
        if line.strip() in (fence, "..."):
            return title, index + 1
        match = _FRONT_TITLE.match(line)
        if match and title is None:
            title = match.group(2)
    # Never closed: a page that merely starts with a rule.
    return None, 0


def _first_heading(lines: list[str]) -> str | None:
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.strip():
            continue
        atx = _ATX.match(line)
        if atx:
            return atx.group(1)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        # Markdown setext and reStructuredText: a line underlined by a run of punctuation.
        if _UNDERLINE.match(following) and not _UNDERLINE.match(line):
            return line.strip()
        html = _HTML_TITLE.search(line)
        if html:
            return html.group(2)
    return None


def _window(text: str, start: int) -> dict[str, Any]:
    """Lines from ``start`` while they fit in ``MAX_PAGE_CHARS`` (always at least one)."""
    lines = split_lines(text)
    if start > max(len(lines), 1):
        raise BeamError(
            "BEM-090",
            f"get_page: start_line {start} is past the end; the page has {len(lines)} lines",
        )
    taken: list[str] = []
    size = 0
    for line in lines[start - 1 :]:
        if taken and size + len(line) + 1 > MAX_PAGE_CHARS:
            break
        taken.append(line[:MAX_PAGE_CHARS])
        size += len(taken[-1]) + 1
    end = start - 1 + len(taken)
    cut = any(len(line) > MAX_PAGE_CHARS for line in lines[start - 1 : end])
    truncated = cut or end < len(lines)
    note: str | None = None
    if end < len(lines):
        note = (
            f"the page is capped at {MAX_PAGE_CHARS} characters per call; call get_page with "
            f"start_line={end + 1} for the rest"
        )
    elif cut:
        note = f"a line longer than {MAX_PAGE_CHARS} characters was cut"
    return {
        "text": "\n".join(taken),
        "start_line": start,
        "end_line": end,
        "total_lines": len(lines),
        "truncated": truncated,
        "note": note,
    }
