"""``search``: find the lines of a job's tree that contain every word of a query.

Everything is read through the path jail (``SandboxRoot.walk`` and ``read_bytes``): a
symlink that leads outside the tree, a hard link, a special file or a file over the read cap
is skipped, never followed or opened. Files whose extension says they are binary are not read
at all; the others are read once, and a whole-file test for every word comes before any
per-line work, so a tree of 20,000 pages is searched in well under a second.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from bot.agents.tree_text import missing
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, json_params, validate_arguments
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import decode_text

__all__ = ["SearchTool"]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_QUERY_CHARS = 200
MAX_TERMS = 10
LINE_CHARS = 200
# Each file first gets up to this many of the result slots, in rank order, so one long
# page cannot crowd every other page out; slots left over go to the best files' other lines.
FIRST_PASS_PER_FILE = 5
# A deterministic bound on one call's reading; past it the note says to narrow with path.
MAX_SCAN_BYTES = 128 << 20

_TERM = re.compile(r'"([^"]*)"|(\S+)')


def _suffixes(names: str) -> frozenset[str]:
    return frozenset(f".{name}" for name in names.split())


# Read first, so a scan cut short by the byte budget has covered the docs themselves.
_TEXT_FIRST = _suffixes(
    "md markdown mdx rst txt adoc asciidoc asc html htm xml yml yaml toml json ini cfg j2 "
    "jinja tex org textile wiki"
)
# Never text: not even opened. Anything else is read and tested (NUL bytes, UTF-8).
_BINARY = _suffixes(
    "png jpg jpeg gif webp bmp ico icns tif tiff psd pdf zip gz tgz bz2 xz zst 7z rar jar "
    "war whl egg woff woff2 ttf otf eot mp3 mp4 m4a mov avi webm ogg wav flac exe dll so "
    "dylib o a class pyc bin dat db sqlite docx xlsx pptx odt ods odp key numbers pages ai "
    "sketch fig"
)


class SearchTool:
    """The ``search`` host tool, bound to one job's tree."""

    def __init__(self, root: SandboxRoot) -> None:
        self._root = root

    def __repr__(self) -> str:
        return f"SearchTool({self._root!r})"

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="search",
            description=(
                "Search the repository's files for lines that contain ALL the words of "
                "'query' (case-insensitive; put a phrase in double quotes to match it as a "
                "whole). Returns 'hits': path, line number and the line (cut to about "
                f"{LINE_CHARS} characters), best files first: files with more matching lines "
                "rank higher. Use a few precise keywords (product terms, option names, error "
                "codes), not a whole question. Then read a page with get_page; a hit alone "
                "is not enough to answer from. 'path' limits the search to a directory or "
                "one file. Binary files, files over the size cap and symlinks leading outside "
                "the repository are skipped. When 'truncated' is true, more lines matched "
                "than were returned: raise 'limit' or narrow with 'path'. Errors: BEM-090 for "
                f"an empty query or more than {MAX_TERMS} words; BEM-100 when 'path' does not "
                "exist; BEM-300..304 for a path the jail refuses."
            ),
            parameters=json_params(
                {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "Words that must all appear in a line, like "
                        "'proxy https_proxy' or '\"connection refused\" pip'.",
                    },
                    "path": {
                        "type": "string",
                        "maxLength": 1024,
                        "description": "Directory or file to search; '' (default) is all.",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIMIT,
                        "description": f"Most hits to return; default {DEFAULT_LIMIT}.",
                    },
                },
                ["query"],
            ),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        checked = validate_arguments(self.spec(), args)
        limit = checked.get("limit", DEFAULT_LIMIT)
        assert isinstance(limit, int)  # the schema says so
        result: JsonValue = await asyncio.to_thread(
            self.search, str(checked["query"]), str(checked.get("path", "")), limit
        )
        return result

    def search(self, query: str, path: str = "", limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
        """The search itself, synchronously: a JSON object for the model."""
        terms = query_terms(query)
        scope = self._root.normalize(path)
        try:
            candidates = self._candidates(scope)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise missing("search", error) from None
        scan = _Scan(terms)
        for candidate in candidates:
            if not scan.take(self._root, candidate):
                break
        return scan.report(query, scope, limit)

    def _candidates(self, scope: str) -> list[str]:
        if scope and not self._root.is_dir(scope):
            if not self._root.exists(scope):
                raise FileNotFoundError(2, "No such file", scope)
            # A file named on purpose is searched whatever its extension says.
            return [scope]
        return _reading_order(self._root.walk(scope))


def query_terms(query: str) -> list[str]:
    """The case-folded words and quoted phrases of ``query``, each once, in order."""
    terms: list[str] = []
    for quoted, word in _TERM.findall(query):
        term = " ".join((quoted or word).split()).casefold()
        if term and term not in terms:
            terms.append(term)
    if not terms:
        raise BeamError("BEM-090", "search: the query has no words; give a few keywords")
    if len(terms) > MAX_TERMS:
        raise BeamError(
            "BEM-090",
            f"search: the query has {len(terms)} words; use at most {MAX_TERMS} precise "
            "keywords (every word must appear in a matching line)",
        )
    return terms


def _reading_order(paths: Iterable[str]) -> list[str]:
    docs: list[str] = []
    others: list[str] = []
    for path in paths:
        suffix = posixpath.splitext(path)[1].lower()
        if suffix in _TEXT_FIRST:
            docs.append(path)
        elif suffix not in _BINARY:
            others.append(path)
    return docs + others


@dataclass
class _FileHits:
    path: str
    count: int = 0
    # (line number, excerpt), at most MAX_LIMIT of them: no call returns more.
    lines: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class _Scan:
    terms: list[str]
    files: list[_FileHits] = field(default_factory=list)
    searched: int = 0
    skipped: int = 0
    scanned_bytes: int = 0
    complete: bool = True

    def take(self, root: SandboxRoot, path: str) -> bool:
        """Search one file; False once the byte budget is spent."""
        if self.scanned_bytes >= MAX_SCAN_BYTES:
            self.complete = False
            return False
        try:
            data = root.read_bytes(path)
        except (BeamError, OSError):
            # A refusal (a symlink leading out, a hard link, a special file, over the cap)
            # or a file that vanished since the walk: not searchable, and not an error.
            self.skipped += 1
            return True
        self.scanned_bytes += len(data)
        text = decode_text(data)
        if text is None:
            self.skipped += 1
            return True
        self.searched += 1
        folded = text.casefold()
        if all(term in folded for term in self.terms):
            self._match_lines(path, text, folded)
        return True

    def _match_lines(self, path: str, text: str, folded: str) -> None:
        hits = _FileHits(path)
        first, rest = self.terms[0], self.terms[1:]
        originals: list[str] | None = None
        for number, low in enumerate(folded.split("\n"), start=1):
            if first not in low or not all(term in low for term in rest):
                continue
            hits.count += 1
            if len(hits.lines) < MAX_LIMIT:
                # Case folding never adds or removes a newline: the two splits line up.
                originals = originals or text.split("\n")
                hits.lines.append((number, _excerpt(originals[number - 1], low, first)))
        if hits.count:
            self.files.append(hits)

    def report(self, query: str, scope: str, limit: int) -> dict[str, Any]:
        ranked = sorted(self.files, key=lambda hits: (-hits.count, hits.path))
        chosen = _choose(ranked, limit)
        total = sum(hits.count for hits in ranked)
        shown = [
            {"path": hits.path, "line": number, "text": excerpt}
            for hits, taken in zip(ranked, chosen, strict=True)
            for number, excerpt in hits.lines[:taken]
        ]
        truncated = len(shown) < total
        return {
            "query": query,
            "path": scope,
            "hits": shown,
            "total_hits": total,
            "files_matched": len(ranked),
            "files_searched": self.searched,
            "files_skipped": self.skipped,
            "truncated": truncated,
            "complete": self.complete,
            "note": self._note(len(shown), total, len(ranked), truncated),
        }

    def _note(self, shown: int, total: int, files: int, truncated: bool) -> str | None:
        notes: list[str] = []
        if not total:
            words = ", ".join(repr(term) for term in self.terms)
            notes.append(
                f"no line contains all of {words}; try fewer or other words "
                "(synonyms, the exact option or product name)"
            )
        elif truncated:
            notes.append(
                f"showing {shown} of {total} matching lines in {files} files; "
                f"raise limit (at most {MAX_LIMIT}) or narrow with path"
            )
        if not self.complete:
            notes.append(
                f"the search stopped after reading {MAX_SCAN_BYTES >> 20} MiB; "
                "narrow it with path to search the rest"
            )
        return "; ".join(notes) or None


def _choose(ranked: list[_FileHits], limit: int) -> list[int]:
    """How many lines of each ranked file to show: a first pass, then the leftovers."""
    taken = [0] * len(ranked)
    left = limit
    for quota in (FIRST_PASS_PER_FILE, MAX_LIMIT):
        for index, hits in enumerate(ranked):
            more = min(quota, len(hits.lines)) - taken[index]
            if more > 0 and left > 0:
                step = min(more, left)
                taken[index] += step
                left -= step
    return taken


def _excerpt(line: str, folded: str, term: str) -> str:
    """The line, stripped, or a window of it around the first term when it is long."""
    stripped = line.strip()
    if len(stripped) <= LINE_CHARS:
        return stripped
    # Offsets in the folded line match the original unless folding changed lengths
    # (rare: 'ß' becomes 'ss'); then the window is merely approximate.
    found = max(folded.find(term), 0)
    start = max(0, min(found - LINE_CHARS // 4, len(line) - LINE_CHARS))
    end = start + LINE_CHARS
    return ("…" if start else "") + line[start:end].strip() + ("…" if end < len(line) else "")
