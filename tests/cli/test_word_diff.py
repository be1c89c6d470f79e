"""``riverbeam approvals show`` marks the words a changed pair changed: in colour on a
terminal, and with git's plain word-diff marks in a "word changes" list either way; piped,
the diff itself prints exactly as it is. Below, the changed pages' broken links, page and line."""

from __future__ import annotations

import io

from rich.console import Console

from bot.cli.render import show_approval
from bot.review.links import BrokenLink, ExternalLink, LinkReport
from bot.store.models import Approval

DIFF = (
    "diff --git a/docs/a.md b/docs/a.md\n--- a/docs/a.md\n+++ b/docs/a.md\n@@ -1,3 +1,2 @@\n"
    "-Run the instaler now.\n+Run the installer now.\n"
    "-wrapped\n-line\n+wrapped line\n"
)


def approval() -> Approval:
    return Approval(
        id="ap1",
        job_id="job1",
        repo="docs",
        requested_by="w",
        call_id="c",
        tool="git_push",
        arguments={},
        diff=DIFF,
    )


def shown(terminal: bool) -> str:
    buffer = io.StringIO()
    out = Console(file=buffer, width=120, force_terminal=terminal, highlight=False, markup=False)
    show_approval(out, approval(), commands=False)
    return buffer.getvalue()


def test_piped_the_diff_is_plain_and_the_word_changes_are_listed() -> None:
    text = shown(terminal=False)
    assert "\x1b[" not in text
    assert DIFF in text
    assert "  docs/a.md:1  [-instaler-] {+installer+}" in text
    assert "  docs/a.md:2  rewrapped only (the same words)" in text


def test_on_a_terminal_the_changed_words_are_highlighted() -> None:
    text = shown(terminal=True)
    # The changed word has a style of its own, apart from the rest of its line.
    assert "\x1b[1;37;41minstaler\x1b[0m" in text
    assert "\x1b[1;37;42minstaller\x1b[0m" in text


def test_the_broken_links_are_listed_with_page_and_line() -> None:
    report = LinkReport(
        pages=["docs/a.md"],
        broken=[BrokenLink(page="docs/a.md", line=3, target="gone.md", reason="not there")],
        external=[ExternalLink(page="docs/a.md", line=5, url="https://example.com")],
    )
    buffer = io.StringIO()
    out = Console(file=buffer, width=120, highlight=False, markup=False)
    show_approval(out, approval().model_copy(update={"links": report}), commands=False)
    text = buffer.getvalue()
    assert "links (1 changed pages checked)\n  docs/a.md:3  gone.md  not there\n" in text
    assert "  docs/a.md:5  https://example.com  (external, not checked)\n" in text
