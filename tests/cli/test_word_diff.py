"""``riverbeam approvals show`` marks the words a changed pair changed: in colour on a
terminal, and with git's plain word-diff marks in a "word changes" list either way; piped,
the diff itself prints exactly as it is."""

from __future__ import annotations

import io

from rich.console import Console

from bot.cli.render import show_approval
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
