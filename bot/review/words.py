"""The words a unified diff's changed lines changed.

A one-word fix in a long paragraph shows in a line diff as a whole removed line and a whole
added line. ``word_changes`` pairs each run of removed lines with the run of added lines that
follows it in a hunk, and marks, on both sides, only the words that differ. A pair whose words
are all the same is named for what it is: ``whitespace`` (the same lines, spacing changed) or
``rewrap`` (the same words, broken into lines differently). Long unchanged stretches inside a
changed line are folded, keeping a few words on either side of the change.

Pure: text in, plain data out. The diff is the approval's (already capped), and the word
comparisons one diff may cost are bounded (``MAX_COMPARISONS``): a pair past the budget is
marked changed whole instead of compared, so the cost stays bounded whatever a repository
holds.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Literal

from pydantic import BaseModel, Field

# Unchanged words in a row beyond which a changed line folds them, and the words kept beside
# a change on either side of a fold.
FOLD_WORDS = 24
KEEP_WORDS = 6
# Word comparisons (old words × new words, summed over the pairs) one diff may cost; a pair
# past what is left is not compared word by word. A comparison's worst case grows with that
# product, so a diff of hostile, repetitive text cannot make a page slow (about 0.7 s in the
# worst case on the development VM, well under it for prose).
MAX_COMPARISONS = 4_000_000

ChangeKind = Literal["words", "whitespace", "rewrap", "too_long"]
Mark = Literal["same", "changed", "folded"]
LineKind = Literal["file", "hunk", "add", "del", "ctx"]

_TOKEN = re.compile(r"\S+|\s+")
_HEADERS = ("diff --git ", "+++ ", "--- ", "index ", "new file", "deleted file")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class Segment(BaseModel):
    """A stretch of one line: unchanged, changed, or unchanged and folded (``text`` keeps the
    whole folded stretch, so nothing is hidden from a reader who opens it)."""

    text: str
    mark: Mark


class ChangedLine(BaseModel):
    diff_line: int = Field(description="0-based index of the line in the diff text")
    side: Literal["old", "new"]
    number: int = Field(description="the line's number in the old or new file")
    segments: list[Segment] = Field(description="the line without its '-'/'+', in stretches")


class WordChange(BaseModel):
    """One run of removed lines and the added lines that replace it."""

    path: str = Field(description="the file, as the diff names its new side")
    kind: ChangeKind = Field(
        description="words: some words changed; whitespace: only spacing inside lines; "
        "rewrap: the same words broken into lines differently; too_long: not compared"
    )
    old_start: int
    new_start: int
    changed_words: int = Field(description="words removed plus words added")
    lines: list[ChangedLine]


def line_kinds(lines: list[str]) -> list[LineKind]:
    """What each line of a unified diff is. Inside a hunk (as many lines as its header
    counts) a line is content whatever it starts with: a removed "-- note" reads "--- note",
    and is no file header."""
    kinds: list[LineKind] = []
    old_left = new_left = 0
    for line in lines:
        kind: LineKind = "ctx"
        if old_left <= 0 and new_left <= 0:
            if match := _HUNK.match(line):
                kind = "hunk"
                old_left = 1 if match[2] is None else int(match[2])
                new_left = 1 if match[4] is None else int(match[4])
            elif line.startswith(_HEADERS):
                kind = "file"
        elif line.startswith("-"):
            kind, old_left = "del", old_left - 1
        elif line.startswith("+"):
            kind, new_left = "add", new_left - 1
        elif not line.startswith("\\"):  # "\ No newline at end of file" counts for nothing
            old_left, new_left = old_left - 1, new_left - 1
        kinds.append(kind)
    return kinds


def word_changes(diff: str) -> list[WordChange]:
    """Every changed line pair of ``diff`` (a unified diff, git's form), words marked."""
    changes: list[WordChange] = []
    path = ""
    old_no = new_no = 0
    removed: list[tuple[int, int, str]] = []  # (diff line, file line, text)
    added: list[tuple[int, int, str]] = []

    budget = MAX_COMPARISONS

    def flush() -> None:
        nonlocal budget
        if removed and added:
            change, cost = _compare(path, removed, added, budget)
            changes.append(change)
            budget -= cost
        removed.clear()
        added.clear()

    lines = diff.splitlines()
    for index, (line, kind) in enumerate(zip(lines, line_kinds(lines), strict=True)):
        if kind == "del":
            if added:  # a removal after additions starts a new pair
                flush()
            removed.append((index, old_no, line[1:]))
            old_no += 1
        elif kind == "add":
            added.append((index, new_no, line[1:]))
            new_no += 1
        elif not line.startswith("\\"):
            flush()
            if kind == "hunk" and (match := _HUNK.match(line)):
                old_no, new_no = int(match[1]), int(match[3])
            elif kind == "file" and line.startswith("+++ "):
                name = line[4:]
                path = name[2:] if name.startswith("b/") else name
            else:
                old_no, new_no = old_no + 1, new_no + 1
    flush()
    return changes


def _compare(
    path: str, removed: list[tuple[int, int, str]], added: list[tuple[int, int, str]], budget: int
) -> tuple[WordChange, int]:
    """The pair's word change, and the comparisons it cost of ``budget``."""
    old = [_TOKEN.findall(text) for _, _, text in removed]
    new = [_TOKEN.findall(text) for _, _, text in added]
    old_words = [t for tokens in old for t in tokens if not t.isspace()]
    new_words = [t for tokens in new for t in tokens if not t.isspace()]
    kind: ChangeKind
    cost = 0
    if old_words == new_words:
        same_lines = len(old) == len(new) and all(
            [t for t in a if not t.isspace()] == [t for t in b if not t.isspace()]
            for a, b in zip(old, new, strict=True)
        )
        kind = "whitespace" if same_lines else "rewrap"
        old_changed: set[int] = set()
        new_changed: set[int] = set()
    elif len(old_words) * len(new_words) > budget:
        kind = "too_long"
        old_changed, new_changed = set(range(len(old_words))), set(range(len(new_words)))
    else:
        kind = "words"
        cost = len(old_words) * len(new_words)
        old_changed, new_changed = _changed_words(old_words, new_words)
    lines = _lines("old", removed, old, old_changed) + _lines("new", added, new, new_changed)
    change = WordChange(
        path=path,
        kind=kind,
        old_start=removed[0][1],
        new_start=added[0][1],
        changed_words=len(old_changed) + len(new_changed),
        lines=lines,
    )
    return change, cost


def _changed_words(old: list[str], new: list[str]) -> tuple[set[int], set[int]]:
    """Indices of the words on each side that are not part of a matching run."""
    old_changed: set[int] = set()
    new_changed: set[int] = set()
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            old_changed.update(range(i1, i2))
            new_changed.update(range(j1, j2))
    return old_changed, new_changed


def _lines(
    side: Literal["old", "new"],
    rows: list[tuple[int, int, str]],
    tokens: list[list[str]],
    changed: set[int],
) -> list[ChangedLine]:
    """Each line's tokens grouped into stretches; ``changed`` counts words across the block."""
    lines = []
    word = 0
    for (diff_line, number, _), line_tokens in zip(rows, tokens, strict=True):
        marked: list[tuple[str, bool]] = []
        for token in line_tokens:
            if token.isspace():
                marked.append((token, False))
                continue
            marked.append((token, word in changed))
            word += 1
        lines.append(
            ChangedLine(diff_line=diff_line, side=side, number=number, segments=_stretches(marked))
        )
    return lines


def _stretches(marked: list[tuple[str, bool]]) -> list[Segment]:
    # Spacing between two changed words joins them into one changed stretch.
    for i in range(1, len(marked) - 1):
        if marked[i][0].isspace() and marked[i - 1][1] and marked[i + 1][1]:
            marked[i] = (marked[i][0], True)
    segments: list[Segment] = []
    start = 0
    for i in range(1, len(marked) + 1):
        if i == len(marked) or marked[i][1] != marked[start][1]:
            text = "".join(token for token, _ in marked[start:i])
            segments.extend([_changed(text)] if marked[start][1] else _fold(text))
            start = i
    if any(s.mark == "changed" for s in segments):
        return segments
    # A line with no changed word (a rewrap, a spacing change) is shown whole.
    return [Segment(text="".join(s.text for s in segments), mark="same")] if segments else []


def _changed(text: str) -> Segment:
    return Segment(text=text, mark="changed")


def _fold(text: str) -> list[Segment]:
    """An unchanged stretch; its middle folded when it is long."""
    tokens = _TOKEN.findall(text)
    words = [i for i, t in enumerate(tokens) if not t.isspace()]
    if len(words) <= FOLD_WORDS:
        return [Segment(text=text, mark="same")]
    head_end = words[KEEP_WORDS - 1] + 1
    tail_start = words[-KEEP_WORDS]
    return [
        Segment(text="".join(tokens[:head_end]), mark="same"),
        Segment(text="".join(tokens[head_end:tail_start]), mark="folded"),
        Segment(text="".join(tokens[tail_start:]), mark="same"),
    ]


def folded_words(text: str) -> int:
    """How many words a folded stretch holds, as its summary says."""
    return sum(1 for t in _TOKEN.findall(text) if not t.isspace())
