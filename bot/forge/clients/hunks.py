"""Where on a pull request's diff a line comment can go: the forges take a comment only on
a line their diff shows, and refuse the whole review (GitHub: 422) for one that is not."""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def new_side_lines(patch: str) -> frozenset[int]:
    """The line numbers, in the file after the change, that the unified diff ``patch``
    shows: added lines and the context around them (a file's hunks as GitHub's ``patch``
    and GitLab's ``diff`` give them, headers or not)."""
    shown: set[int] = set()
    line: int | None = None
    for text in patch.splitlines():
        if (hunk := _HUNK.match(text)) is not None:
            line = int(hunk.group(1))
        elif line is None or text.startswith(("-", "\\")):
            continue
        elif text.startswith(("+", " ")) or text == "":
            shown.add(line)
            line += 1
    return frozenset(shown)
