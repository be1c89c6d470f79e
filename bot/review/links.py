"""The links of a change's Markdown pages, checked against the commit that would land.

For each changed page (added or modified ``.md``/``.markdown``), every link and image the
Markdown parser finds (inline, reference-style, in tables; never in code) is sorted:

* external (``http``, ``https``, ``//host``, ``mailto``): listed with its page and line,
  never fetched;
* relative (``../guide.md``, ``img/a.png``, ``/docs/x.md``, ``#section``): resolved against
  the page's folder (``/`` from the repository's root) in the commit's tree. A path that is
  not in the tree, leaves the repository, or (for an image) is a folder is broken. An anchor
  (``page.md#section``, ``#section``) must name a heading of the target page, slugged as the
  forges do, or an ``id``/``name`` its HTML declares;
* any other scheme (``javascript:``, ``data:``, ``file:``) is broken: no docs page needs it.

The tree is read as data (the caller hands in a ``pygit2.Tree`` opened on an untrusted object
database); pages and targets over ``MAX_PAGE_BYTES`` are not parsed, nor any once
``MAX_PARSED_BYTES`` were parsed in all (a page past it is skipped, an anchor into a target
past it is taken as found), and the lists are cut at
``MAX_LISTED`` so the report stays small enough to keep beside the approval.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from itertools import pairwise
from urllib.parse import unquote, urlsplit

import pygit2
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pydantic import BaseModel, Field

MAX_PAGE_BYTES = 1_048_576
MAX_PARSED_BYTES = 8_388_608
MAX_PAGES = 100
MAX_LISTED = 200
MARKDOWN_SUFFIXES = (".md", ".markdown")

_EXTERNAL = ("http", "https", "mailto")
_HTML_ID = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_NOT_IN_SLUG = re.compile(r"[^\w\- ]", re.UNICODE)


class BrokenLink(BaseModel):
    page: str
    line: int = Field(description="1-based line of the page the link is on")
    target: str = Field(description="the link as written")
    reason: str


class ExternalLink(BaseModel):
    page: str
    line: int
    url: str


class LinkReport(BaseModel):
    """What checking the changed pages' links found."""

    pages: list[str] = Field(default=[], description="the changed Markdown pages checked")
    broken: list[BrokenLink] = []
    external: list[ExternalLink] = Field(default=[], description="listed, never fetched")
    skipped: list[str] = Field(
        default=[],
        description="changed pages not checked: over the size cap, past the bytes parsed in "
        "all, or too many",
    )
    cut: bool = Field(default=False, description="more links than the lists keep")


def is_markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES)


def parser() -> MarkdownIt:
    """CommonMark plus tables: what the forges render, so what a link check must read."""
    return MarkdownIt("commonmark").enable("table")


def check_links(tree: pygit2.Tree, pages: list[str]) -> LinkReport:
    """The links of ``pages`` (paths in ``tree``) checked against ``tree``."""
    checker = _Checker(tree)
    report = LinkReport()
    for index, page in enumerate(sorted(set(pages))):
        source = checker.text(page) if index < MAX_PAGES else None
        if source is None:
            report.skipped.append(page)
            continue
        report.pages.append(page)
        for line, target, image in links_of(source):
            checker.classify(report, page, line, target, image=image)
    return report


def links_of(source: str) -> list[tuple[int, str, bool]]:
    """Each link and image destination of a Markdown page: its 1-based line, the
    destination, and whether it is an image."""
    found: list[tuple[int, str, bool]] = []
    reader = parser()
    # The renderer drops a javascript: or data: link to plain text; the check lists it, so
    # that the page's author learns of it.
    reader.validateLink = lambda url: True  # type: ignore[method-assign]
    for block in reader.parse(source):
        if block.type != "inline" or block.children is None:
            continue
        line = block.map[0] + 1 if block.map else 1
        for child in block.children:
            if child.type in ("softbreak", "hardbreak"):
                line += 1
            elif child.type == "link_open":
                found.append((line, str(child.attrGet("href") or ""), False))
            elif child.type == "image":
                found.append((line, str(child.attrGet("src") or ""), True))
    return found


def anchors_of(source: str) -> set[str]:
    """The anchors a page offers: its headings slugged as the forges do (a repeated heading
    gets ``-1``, ``-2``...), and any ``id``/``name`` its HTML declares."""
    anchors: set[str] = set(_HTML_ID.findall(source))
    seen: Counter[str] = Counter()
    tokens = parser().parse(source)
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = slugify(_plain(inline))
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def slugify(heading: str) -> str:
    return _NOT_IN_SLUG.sub("", heading.strip().lower()).replace(" ", "-")


def _plain(inline: Token) -> str:
    return "".join(
        child.content
        for child in inline.children or []
        if child.type in ("text", "code_inline", "softbreak")
    )


class _Checker:
    def __init__(self, tree: pygit2.Tree) -> None:
        self._tree = tree
        self._anchors: dict[str, set[str] | None] = {}
        self._budget = MAX_PARSED_BYTES

    def entry(self, path: str) -> pygit2.Object | None:
        try:
            return self._tree[path] if path else self._tree
        except (KeyError, ValueError):
            return None

    def text(self, path: str) -> str | None:
        """A page's text, or None when it is not a file or is over the size cap."""
        entry = self.entry(path)
        if not isinstance(entry, pygit2.Blob) or entry.size > min(MAX_PAGE_BYTES, self._budget):
            return None
        self._budget -= entry.size
        return entry.data.decode("utf-8", errors="replace")

    def anchors(self, path: str) -> set[str] | None:
        if path not in self._anchors:
            text = self.text(path)
            # Compared without case, as browsers match the forges' lower-case slugs.
            self._anchors[path] = (
                None if text is None else {anchor.lower() for anchor in anchors_of(text)}
            )
        return self._anchors[path]

    def classify(
        self, report: LinkReport, page: str, line: int, target: str, *, image: bool
    ) -> None:
        reason = self._problem(report, page, line, target, image=image)
        if reason is None:
            return
        if len(report.broken) >= MAX_LISTED:
            report.cut = True
            return
        report.broken.append(BrokenLink(page=page, line=line, target=target, reason=reason))

    def _problem(
        self, report: LinkReport, page: str, line: int, target: str, *, image: bool
    ) -> str | None:
        try:
            parts = urlsplit(target.strip())
        except ValueError:
            return "not a valid link"
        if parts.scheme.lower() in _EXTERNAL or (not parts.scheme and parts.netloc):
            if len(report.external) >= MAX_LISTED:
                report.cut = True
            else:
                report.external.append(ExternalLink(page=page, line=line, url=target))
            return None
        if parts.scheme:
            return f"the {parts.scheme.lower()}: scheme is not allowed in a docs page"
        if not parts.path:
            return self._anchor_problem(page, parts.fragment) if parts.fragment else None
        path = unquote(parts.path)
        joined = (
            path.lstrip("/")
            if path.startswith("/")
            else posixpath.join(posixpath.dirname(page), path)
        )
        resolved = posixpath.normpath(joined)
        if resolved == ".":
            resolved = ""
        if resolved == ".." or resolved.startswith("../"):
            return "leads outside the repository"
        entry = self.entry(resolved)
        if entry is None:
            return f"{resolved or '/'} is not in the commit"
        if image and not isinstance(entry, pygit2.Blob):
            return f"{resolved or '/'} is a folder, not an image"
        if parts.fragment and isinstance(entry, pygit2.Blob) and is_markdown(resolved):
            return self._anchor_problem(resolved, parts.fragment)
        return None

    def _anchor_problem(self, path: str, fragment: str) -> str | None:
        anchors = self.anchors(path)
        if anchors is None or unquote(fragment).lower() in anchors:
            return None
        return f"{path} has no heading #{fragment}"
