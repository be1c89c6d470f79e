"""The rendered preview of a changed page: CommonMark plus tables, every block sanitised, links
and images inert, hostile pages rendered as text or not at all, changed blocks marked."""

from __future__ import annotations

import time
from html.parser import HTMLParser
from pathlib import Path

import pygit2
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.jobs.branch_change import read_pages
from bot.review.preview import (
    ALLOWED_TAGS,
    MAX_LINE_COMPARISONS,
    MAX_PREVIEW_BYTES,
    PageSource,
    RenderedSide,
    render,
    render_page,
)
from harness.gitkit import commit_all, git, write_files


class Elements(HTMLParser):
    """Every element and attribute of some HTML, as a browser's tokenizer reads them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str, str | None]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend((tag, name, value) for name, value in attrs)


def html_of(side: RenderedSide) -> str:
    return "".join(block.html for block in side.blocks)


def assert_inert(html: str) -> None:
    """Only formatting elements; no attribute but our own classes and a list's start."""
    found = Elements(html)
    assert set(found.tags) <= ALLOWED_TAGS, found.tags
    for tag, name, value in found.attributes:
        assert (tag, name) in {("span", "class"), ("ol", "start")}, (tag, name, value)
        if name == "class":
            assert value in {"pv-link", "pv-href", "pv-img"}


HOSTILE = """# Title <script>alert(1)</script>

<script>alert("raw")</script>

<div onclick="alert(2)" style="position:fixed">raw block</div>

<iframe src="https://evil.example/"></iframe>

<img src=http://evil.example/track.png onerror=alert(3)>

Inline <img src="http://evil.example/inline.png"> and <a href="javascript:alert(4)">raw link</a>.

[click me](javascript:alert(5)) [vb](vbscript:msgbox) [data](data:text/html;base64,PHNjcmlwdD4=)
[file](file:///etc/passwd) [ok](guide.md#start) <https://autolink.example/>

![remote](http://evil.example/pixel.png) ![local](img/logo.png "t\\" onerror=\\"x")

<style>body { display: none }</style><!-- comment --><?php echo 1; ?>

| a <b>b</b> | `c` |
|---|--:|
| [x](javascript:alert(6)) | <svg onload=alert(7)> |
"""


def test_hostile_markup_renders_as_text_and_nothing_acts() -> None:
    side = render(HOSTILE)
    html = html_of(side)
    assert_inert(html)
    # No element but formatting (assert_inert); an attribute written in the page is text.
    lowered = html.lower()
    for forbidden in (
        "<script",
        "<img",
        "<iframe",
        "<style",
        "<svg",
        "<a ",
        "<!--",
        "<?php",
    ):
        assert forbidden not in lowered, forbidden
    # What a page author wrote still shows, as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=http://evil.example/track.png onerror=alert(3)&gt;" in html
    # A link is its text and its destination, in grey; an image its alt text and path.
    assert '<span class="pv-link">ok</span><span class="pv-href"> (guide.md#start)</span>' in html
    assert '<span class="pv-img">image: remote (http://evil.example/pixel.png)</span>' in html
    # The renderer refuses script-bearing destinations outright: they stay plain text.
    assert "[click me](javascript:alert(5))" in html
    assert "<table>" in html and "<td>" in html


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<script>",
                "</script>",
                "<img src=x onerror=y>",
                "javascript:",
                "[a](",
                ")",
                "](",
                "![i](",
                "http://e/x.png",
                "<a href='",
                "'>",
                "\n",
                "\n\n",
                "# ",
                "| a |\n|---|\n",
                "`",
                "```\n",
                "<",
                ">",
                '"',
                "&",
                "<div style='x'>",
                "\\",
                "*",
                "<!--",
                "-->",
                "<svg/onload=x>",
                "[r]: javascript:x\n",
                "[r]",
                "<https://x>",
                "- ",
                "1. ",
            ]
        ),
        max_size=40,
    ).map("".join)
)
def test_any_mix_of_hostile_pieces_renders_inert(text: str) -> None:
    assert_inert(html_of(render(text)))


def test_changed_blocks_are_marked_on_both_sides() -> None:
    before = "# Install\n\nInstal the tool.\n\n- one\n- two\n\nThe end.\n"
    after = "# Install\n\nInstall the tool.\n\n- one\n- two\n- three\n\nThe end.\n"
    page = render_page(PageSource(path="docs/install.md", before=before, after=after))
    marked = [(b.html.split(">")[0], b.changed) for b in page.after.blocks]
    assert marked == [("<h1", False), ("<p", True), ("<ul", True), ("<p", False)]
    assert [b.changed for b in page.before.blocks] == [False, True, False, False]


def test_a_new_page_says_so_before() -> None:
    page = render_page(PageSource(path="new.md", before=None, after="# New\n"))
    assert page.before.note == "The change adds this page." and not page.before.blocks
    assert page.after.blocks[0].html == "<h1>New</h1>\n"


def test_a_five_megabyte_page_is_not_rendered_and_says_why() -> None:
    huge = ("A paragraph of prose that goes on. " * 30 + "\n\n") * 5000
    assert len(huge) > 5_000_000
    side = render(huge)
    assert side.blocks == []
    assert side.note == "over the preview cap of 256 KiB: read the diff"


def test_ten_thousand_links_render_within_the_cap() -> None:
    page = "".join(
        f"[link {i}](page-{i}.md) " + ("\n" if i % 10 == 9 else "") for i in range(10_000)
    )
    assert len(page.encode()) <= MAX_PREVIEW_BYTES
    started = time.perf_counter()
    side = render(page)
    elapsed = time.perf_counter() - started
    html = html_of(side)
    assert html.count('<span class="pv-link">') == 10_000
    assert_inert(html)
    print(f"\nrendered a {len(page.encode()):,}-byte page of 10,000 links in {elapsed:.3f} s")


def test_the_largest_page_under_the_cap_renders(tmp_path: Path) -> None:
    paragraph = "Words with *emphasis*, `code` and [a link](x.md). " * 4 + "\n\n"
    page = paragraph * (MAX_PREVIEW_BYTES // len(paragraph))
    started = time.perf_counter()
    side = render(page)
    elapsed = time.perf_counter() - started
    assert len(side.blocks) == MAX_PREVIEW_BYTES // len(paragraph)
    print(f"\nrendered the largest page, {len(page.encode()):,} bytes, in {elapsed:.3f} s")


def test_parking_captures_each_changed_pages_text_within_the_caps(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "-q", "--initial-branch=main", str(work))
    write_files(work, {"a.md": "# A\n", "big.md": "# Big\n", "keep.md": "# Keep\n"})
    base = commit_all(work, "base")
    write_files(
        work,
        {
            "a.md": "# A, changed\n",
            "new.md": "# New\n",
            "big.md": "x" * (MAX_PREVIEW_BYTES + 1),
            "notes.txt": "not a page\n",
        },
    )
    head = commit_all(work, "change")
    sources = read_pages(work / ".git" / "objects", base, head).sources
    assert sources == [
        PageSource(path="a.md", before="# A\n", after="# A, changed\n"),
        PageSource(path="big.md", note="over the preview cap of 256 KiB: read the diff"),
        PageSource(path="new.md", before=None, after="# New\n"),
    ]
    assert isinstance(pygit2.Repository(str(work)).head.target, pygit2.Oid)


def test_finding_the_changed_blocks_is_bounded() -> None:
    """A page whose every line repeats (the line matcher's worst case): the lines both sides
    share at the start and the end are unchanged, and past the comparison budget everything
    between them counts as changed."""
    before = "\n\n".join(["a", "b"] * 2500) + "\n\nsame end\n"
    after = "\n\n".join(["b", "a"] * 2500) + "\n\nsame end\n"
    assert len(before.splitlines()) ** 2 > MAX_LINE_COMPARISONS
    page = render_page(PageSource(path="p.md", before=before, after=after))
    assert [b.changed for b in page.after.blocks] == [True] * 5000 + [False]
    one_line = render_page(
        PageSource(path="p.md", before=before, after=before.replace("same end", "new end"))
    )
    assert [b.changed for b in one_line.after.blocks] == [False] * 5000 + [True]
