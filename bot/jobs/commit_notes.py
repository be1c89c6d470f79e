"""Reading a drafted commit message out of the model's answer.

The commit-notes skill answers with the message inside one fenced block, then at most two
lines of remarks. The subject is the block's first non-blank line and the body what follows
the blank line after it. A subject over 72 characters is cut at the last word boundary that
fits (the outcome says it was), rather than failing a job whose draft is otherwise usable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SUBJECT_CHARS = 72
_FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(?P<body>.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class CommitMessage:
    subject: str
    body: str
    subject_truncated: bool = False


def parse_commit_message(answer: str) -> CommitMessage:
    """The subject and body of the draft in ``answer`` (the first fenced block, if any)."""
    fenced = _FENCE.search(answer)
    text = fenced["body"] if fenced else answer
    lines = text.strip("\n").splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return CommitMessage(subject="", body="")
    subject, truncated = _fit(lines[0].strip())
    body = "\n".join(lines[1:]).strip("\n")
    return CommitMessage(subject=subject, body=body.rstrip(), subject_truncated=truncated)


def _fit(subject: str) -> tuple[str, bool]:
    if len(subject) <= MAX_SUBJECT_CHARS:
        return subject, False
    cut = subject[: MAX_SUBJECT_CHARS + 1].rsplit(" ", 1)[0].rstrip(" ,;:-")
    # One word longer than the limit has no boundary to cut at: cut the word.
    if not cut or len(cut) > MAX_SUBJECT_CHARS:
        cut = subject[:MAX_SUBJECT_CHARS]
    return cut, True
