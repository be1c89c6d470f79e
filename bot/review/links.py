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

from bot.config import Site

MAX_PAGE_BYTES = 1_048_576
MAX_PARSED_BYTES = 8_388_608
MAX_PAGES = 100
MAX_LISTED = 200
MARKDOWN_SUFFIXES = (".md", ".markdown")
LINK_MODE = 0o120000
MAX_LINK_HOPS = 8

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


def check_links(tree: pygit2.Tree, pages: list[str], site: Site | None = None) -> LinkReport:
    """The links of ``pages`` (paths in ``tree``) checked against ``tree``, resolved as
    ``site`` builds them (None: as ``detect_site`` finds in the tree)."""
    checker = _Checker(tree, site or detect_site(tree))
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


# The site's own configuration, where it says which generator builds the pages.
_SITE_FILES: tuple[tuple[str, Site], ...] = (
    ("book.toml", "mdbook"),
    ("mkdocs.yml", "mkdocs"),
    ("mkdocs.yaml", "mkdocs"),
    ("conf.py", "sphinx"),
    ("docs/conf.py", "sphinx"),
    ("docs/source/conf.py", "sphinx"),
    ("source/conf.py", "sphinx"),
)
_SPHINX_SOURCES = (".rst", ".md", ".txt")


def detect_site(tree: pygit2.Tree) -> Site:
    """``mdbook`` with a ``book.toml``, ``mkdocs`` with an ``mkdocs.yml``, ``sphinx`` with a
    ``conf.py`` where Sphinx looks, else ``plain`` (links name the files themselves)."""
    for name, site in _SITE_FILES:
        try:
            if isinstance(tree[name], pygit2.Blob):
                return site
        except KeyError:
            continue
    return "plain"


def site_sources(site: Site, path: str, *, folder_url: bool) -> list[str]:
    """The sources ``site`` builds the URL ``path`` from, most likely first: mdBook's
    ``x.html`` from ``x.md`` (and ``index.html`` from ``README.md``), MkDocs' directory URL
    ``x/`` from ``x.md`` or ``x/index.md``, Sphinx's ``x.html`` from ``x.rst`` or ``x.md``."""
    stem, suffix = posixpath.splitext(path)
    folder = path if folder_url or not suffix else None
    found: list[str] = []
    if site == "mdbook":
        if suffix == ".html":
            found.append(f"{stem}.md")
            if posixpath.basename(stem) == "index":
                found.append(posixpath.join(posixpath.dirname(stem), "README.md"))
        if folder is not None:
            found += [posixpath.join(folder, "index.md"), posixpath.join(folder, "README.md")]
    elif site == "mkdocs":
        if suffix == ".html":
            found.append(f"{stem}.md")
        if folder is not None:
            found += [f"{folder}.md", posixpath.join(folder, "index.md")]
            found.append(posixpath.join(folder, "README.md"))
    elif site == "sphinx":
        if suffix == ".html":
            found += [f"{stem}{source}" for source in _SPHINX_SOURCES]
        if folder is not None:
            found += [posixpath.join(folder, f"index{source}") for source in _SPHINX_SOURCES]
    return [candidate.lstrip("/") for candidate in found]


def url_folder(site: Site, page: str, link: str) -> str:
    """The folder a relative ``link`` on ``page`` starts from: the page's own, except for a
    URL-style link (``../setup/``) on an MkDocs page, which is served one folder deeper
    (``docs/start.md`` at ``start/``) unless it is its folder's index."""
    folder = posixpath.dirname(page)
    url_style = link.endswith("/") or not posixpath.splitext(link)[1]
    index = posixpath.basename(page).lower() in ("index.md", "readme.md")
    if site == "mkdocs" and url_style and not index:
        return posixpath.splitext(page)[0]
    return folder


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
    def __init__(self, tree: pygit2.Tree, site: Site) -> None:
        self._tree = tree
        self._site = site
        self._anchors: dict[str, set[str] | None] = {}
        self._budget = MAX_PARSED_BYTES

    def entry(self, path: str) -> pygit2.Object | None:
        """The object at ``path``, through symlinked folders of the tree (as the site
        generator reads the checkout); None when absent or leading outside."""
        try:
            return self._tree[path] if path else self._tree
        except (KeyError, ValueError):
            return self._through_links(path)

    def _through_links(self, path: str) -> pygit2.Object | None:
        pending = [part for part in path.split("/") if part]
        reached, hops = "", 0
        while pending:
            part = pending.pop(0)
            step = f"{reached}/{part}" if reached else part
            found = self._lookup(step)
            if found is None:
                return None
            if isinstance(found, pygit2.Blob) and found.filemode == LINK_MODE:
                hops += 1
                link = found.data.decode("utf-8", errors="replace")
                target = posixpath.normpath(posixpath.join(posixpath.dirname(step), link))
                if hops > MAX_LINK_HOPS or target == ".." or target.startswith(("../", "/")):
                    return None
                reached = "" if target == "." else target
                continue
            reached = step
        return self._lookup(reached)

    def _lookup(self, path: str) -> pygit2.Object | None:
        try:
            return self._tree[path] if path and path != "." else self._tree
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
            else posixpath.join(url_folder(self._site, page, path), path)
        )
        resolved = posixpath.normpath(joined)
        if resolved == ".":
            resolved = ""
        if resolved == ".." or resolved.startswith("../"):
            return "leads outside the repository"
        found = self._source_of(resolved, folder_url=path.endswith("/"))
        if found is None:
            return f"{resolved or '/'} is not in the commit"
        resolved, entry = found
        if image and not isinstance(entry, pygit2.Blob):
            return f"{resolved or '/'} is a folder, not an image"
        if parts.fragment and isinstance(entry, pygit2.Blob) and is_markdown(resolved):
            return self._anchor_problem(resolved, parts.fragment)
        return None

    def _source_of(self, path: str, *, folder_url: bool) -> tuple[str, pygit2.Object] | None:
        """The file or folder a link's ``path`` names as the site generator reads it: the
        path itself, else the source the site builds that URL from (``site_sources``)."""
        for candidate in (path, *site_sources(self._site, path, folder_url=folder_url)):
            entry = self.entry(candidate)
            if entry is not None and not (candidate != path and isinstance(entry, pygit2.Tree)):
                return candidate, entry
        return None

    def _anchor_problem(self, path: str, fragment: str) -> str | None:
        anchors = self.anchors(path)
        if anchors is None or unquote(fragment).lower() in anchors:
            return None
        return f"{path} has no heading #{fragment}"
