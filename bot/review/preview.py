"""The changed Markdown pages, before and after, rendered as a reviewer will read them.

Repository content is hostile, so the rendering is built to be inert, in three layers:

1. markdown-it-py parses CommonMark plus tables with raw HTML off: ``<script>``, ``<img>``,
   ``<iframe>`` written in a page come out as text. Its link validation drops
   ``javascript:``, ``vbscript:``, ``file:`` and most ``data:`` destinations.
2. Links and images render as text, never as elements that act: a link is its text followed
   by its destination in grey (nothing to click, nothing prefetched), an image is its alt text
   and path in a frame (nothing loads, from this server or another).
3. nh3 (the Ammonia sanitiser) cleans every block with an allowlist of plain formatting
   elements and no attributes but table alignment, as a second wall should either layer above
   ever let something through. The page's CSP stays as it is.

Pages are rendered block by block (top-level blocks, by the parser's line map), and a block
that holds a line the change touched is marked. A side over ``MAX_PREVIEW_BYTES`` is not
rendered: the page says why and the diff stands alone.

The sources are captured when the job parks (``page_sources``, from the commit's trees, with
a total budget) and rendered when a page is shown (``render_page``), so a sanitiser fix
applies to approvals already waiting.
"""

from __future__ import annotations

import html as markup
from collections.abc import Sequence
from difflib import SequenceMatcher

import nh3
import pygit2
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pydantic import BaseModel, Field

from bot.review.links import parser

MAX_PREVIEW_BYTES = 262_144
MAX_PREVIEW_TOTAL = 1_048_576
# Lines compared (old × new) to find the changed blocks of a page; past it, everything
# between the lines both sides share at their start and end counts as changed.
MAX_LINE_COMPARISONS = 4_000_000

ALLOWED_TAGS = {
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "pre", "code",
    "em", "strong", "del", "hr", "br", "table", "thead", "tbody", "tr", "th", "td", "span",
}  # fmt: skip
# No style attribute: the CSP refuses inline styles (a table's column alignment is dropped).
ALLOWED_ATTRIBUTES = {"ol": {"start"}}
# Only the classes this module writes; anything else a page could smuggle is dropped.
ALLOWED_CLASSES = {"span": {"pv-link", "pv-href", "pv-img"}}


class PageSource(BaseModel):
    """One changed page's text before and after, as stored beside the approval."""

    path: str
    before: str | None = Field(default=None, description="null: the change adds the page")
    after: str | None = None
    note: str = Field(default="", description="why the page is not previewed, if it is not")


class Block(BaseModel):
    html: str = Field(description="sanitised HTML of one top-level block")
    changed: bool


class RenderedSide(BaseModel):
    blocks: list[Block] = []
    note: str = ""


class RenderedPage(BaseModel):
    path: str
    before: RenderedSide
    after: RenderedSide
    note: str = ""


def page_sources(
    base: pygit2.Tree, head: pygit2.Tree, paths: Sequence[str], *, budget: int = MAX_PREVIEW_TOTAL
) -> list[PageSource]:
    """The before and after text of each page of ``paths`` (in ``head``), within ``budget``
    bytes in all; a side over ``MAX_PREVIEW_BYTES`` or past the budget is left out, and the
    page's ``note`` says why."""
    sources = []
    for path in sorted(set(paths)):
        before, after = _blob(base, path), _blob(head, path)
        sizes = [blob.size for blob in (before, after) if blob is not None]
        note = ""
        if any(size > MAX_PREVIEW_BYTES for size in sizes):
            note = f"over the preview cap of {MAX_PREVIEW_BYTES // 1024} KiB: read the diff"
        elif sum(sizes) > budget:
            note = "the change's pages are over the preview budget: read the diff"
        if note:
            sources.append(PageSource(path=path, note=note))
            continue
        budget -= sum(sizes)
        sources.append(PageSource(path=path, before=_text(before), after=_text(after)))
    return sources


def render_page(source: PageSource) -> RenderedPage:
    """``source`` rendered, both sides, with the blocks the change touched marked."""
    if source.note:
        empty = RenderedSide()
        return RenderedPage(path=source.path, before=empty, after=empty, note=source.note)
    old = source.before or ""
    new = source.after or ""
    old_changed, new_changed = _changed_lines(old, new)
    before = (
        RenderedSide(note="The change adds this page.")
        if source.before is None
        else render(old, old_changed)
    )
    return RenderedPage(path=source.path, before=before, after=render(new, new_changed))


def render(text: str, changed: set[int] | None = None) -> RenderedSide:
    """``text`` rendered block by block; a block holding a 0-based line of ``changed`` is
    marked. Over ``MAX_PREVIEW_BYTES`` it is not rendered and the side says why."""
    if len(text.encode()) > MAX_PREVIEW_BYTES:
        return RenderedSide(
            note=f"over the preview cap of {MAX_PREVIEW_BYTES // 1024} KiB: read the diff"
        )
    changed = changed or set()
    md = _renderer()
    env: EnvType = {}
    tokens = md.parse(text, env)
    blocks = []
    for start, end in _top_level(tokens):
        lines = tokens[start].map or [0, 0]
        html = md.renderer.render(tokens[start:end], md.options, env)
        blocks.append(Block(html=sanitise(html), changed=any(n in changed for n in range(*lines))))
    return RenderedSide(blocks=blocks)


def sanitise(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        allowed_classes=ALLOWED_CLASSES,
        url_schemes=set(),
        strip_comments=True,
        link_rel=None,
    )


def _renderer() -> MarkdownIt:
    md = parser()
    md.options["html"] = False
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    md.add_render_rule("image", _image)
    return md


def _link_open(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Kept for the matching link_close, which shows the destination after the text.
    env.setdefault("hrefs", []).append(str(tokens[idx].attrGet("href") or ""))
    return '<span class="pv-link">'


def _link_close(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    href = _escape(env["hrefs"].pop())
    return f'</span><span class="pv-href"> ({href})</span>'


def _image(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    alt = _escape(self.renderInlineAsText(token.children or [], options, env))
    src = _escape(str(token.attrGet("src") or ""))
    return f'<span class="pv-img">image: {alt} ({src})</span>'


def _escape(text: str) -> str:
    return markup.escape(text, quote=True)


def _top_level(tokens: list[Token]) -> list[tuple[int, int]]:
    """Each top-level block as a slice of ``tokens``."""
    blocks = []
    start = 0
    depth = 0
    for index, token in enumerate(tokens):
        depth += token.nesting
        if depth == 0:
            blocks.append((start, index + 1))
            start = index + 1
    return blocks


def _changed_lines(old: str, new: str) -> tuple[set[int], set[int]]:
    """The 0-based lines of each side the change removed or added. The lines both sides
    open and end with are the same; what lies between is compared line by line when that
    costs at most ``MAX_LINE_COMPARISONS``, else all of it counts as changed."""
    a, b = old.splitlines(), new.splitlines()
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if len(middle_a) * len(middle_b) > MAX_LINE_COMPARISONS:
        return set(range(head, len(a) - tail)), set(range(head, len(b) - tail))
    old_changed: set[int] = set()
    new_changed: set[int] = set()
    matcher = SequenceMatcher(None, middle_a, middle_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            old_changed.update(range(head + i1, head + i2))
            new_changed.update(range(head + j1, head + j2))
    return old_changed, new_changed


def _blob(tree: pygit2.Tree, path: str) -> pygit2.Blob | None:
    try:
        entry = tree[path]
    except (KeyError, ValueError):
        return None
    return entry if isinstance(entry, pygit2.Blob) else None


def _text(blob: pygit2.Blob | None) -> str | None:
    return None if blob is None else blob.data.decode("utf-8", errors="replace")
