"""Diffs and frames turned into lines the templates show as text.

Everything here is plain data that the templates autoescape; the live script inserts the
lines the server rendered, never text of its own. Diffs, requests and frames carry
repository and model text, which is hostile until shown otherwise, so nothing on these
pages is ever marked safe.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from markupsafe import Markup
from pydantic import BaseModel, ConfigDict

from bot.core.frames import (
    ChunkFrame,
    DoneFrame,
    ErrorFrame,
    Frame,
    PlaceholderFrame,
    ResultStatus,
    ThinkingFrame,
    ToolFrame,
)
from bot.review.preview import PageSource, render_page
from bot.review.words import LineKind, Mark, Segment, folded_words, line_kinds, word_changes
from bot.store.models import JobEvent

MAX_ARGUMENT_CHARS = 300

NOTES = {
    "whitespace": "spacing only: the same words on the same lines",
    "rewrap": "rewrapped only: the same words, broken into lines differently",
    "too_long": "too long to compare word by word",
}


class Stretch(BaseModel):
    text: str
    mark: Mark
    words: int = 0  # how many words a folded stretch holds, as its summary says

    @classmethod
    def of(cls, segment: Segment) -> Stretch:
        words = folded_words(segment.text) if segment.mark == "folded" else 0
        return cls(text=segment.text, mark=segment.mark, words=words)


class DiffLine(BaseModel):
    kind: LineKind
    text: str
    # A changed line of a removed/added pair, in stretches (its words marked), and the note
    # that opens a pair whose words did not change.
    segments: list[Stretch] = []
    note: str = ""


def diff_lines(diff: str) -> list[DiffLine]:
    """A unified diff, each line classed: file headers, hunk headers, added, removed, context;
    the lines of each changed pair carry their words marked."""
    marks: dict[int, list[Stretch]] = {}
    notes: dict[int, str] = {}
    for change in word_changes(diff):
        for line in change.lines:
            marks[line.diff_line] = [Stretch.of(segment) for segment in line.segments]
        if change.kind in NOTES:
            notes[change.lines[0].diff_line] = NOTES[change.kind]
    texts = diff.splitlines()
    return [
        DiffLine(kind=kind, text=text, segments=marks.get(index, []), note=notes.get(index, ""))
        for index, (text, kind) in enumerate(zip(texts, line_kinds(texts), strict=True))
    ]


class PreviewBlock(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    html: Markup
    changed: bool


class PreviewSide(BaseModel):
    blocks: list[PreviewBlock]
    note: str


class Preview(BaseModel):
    path: str
    before: PreviewSide
    after: PreviewSide
    note: str


def previews(sources: list[PageSource]) -> list[Preview]:
    """Each changed page rendered before and after. The ONE place the pages mark anything
    safe: ``bot.review.preview`` renders links and images inert and nh3 sanitises every
    block with an allowlist of formatting elements, so the HTML holds nothing that acts."""
    shown = []
    for source in sources:
        page = render_page(source)
        sides = [
            PreviewSide(
                blocks=[PreviewBlock(html=Markup(b.html), changed=b.changed) for b in side.blocks],
                note=side.note,
            )
            for side in (page.before, page.after)
        ]
        shown.append(Preview(path=page.path, before=sides[0], after=sides[1], note=page.note))
    return shown


class FrameLine(BaseModel):
    """One line of a job's live log: what kind of frame, a short title, and its text."""

    type: str
    title: str
    body: str = ""
    failed: bool = False


def frame_line(frame: Frame) -> FrameLine:
    match frame:
        case ToolFrame(record=record):
            arguments = json.dumps(record.arguments, ensure_ascii=False)
            if len(arguments) > MAX_ARGUMENT_CHARS:
                arguments = arguments[:MAX_ARGUMENT_CHARS] + "…"
            body = arguments
            if record.error is not None:
                body += f"\n{record.error.code}: {record.error.message}"
            verb = "ran" if record.ok else "failed"
            return FrameLine(
                type="tool", title=f"{record.name} {verb}", body=body, failed=not record.ok
            )
        case ChunkFrame(text=text):
            return FrameLine(type="chunk", title="Answer", body=text)
        case ThinkingFrame(text=text):
            return FrameLine(type="thinking", title="Thinking", body=text)
        case DoneFrame(result=result):
            titles = {
                ResultStatus.COMPLETED: "Run finished",
                ResultStatus.INTERRUPTED: "Paused: a reviewer must approve the next step",
                ResultStatus.FAILED: "Run failed",
                ResultStatus.REFUSED: "The model declined the request",
            }
            body = "" if result.error is None else f"{result.error.code}: {result.error.message}"
            if result.refusal is not None:
                body = result.refusal
            failed = result.status in (ResultStatus.FAILED, ResultStatus.REFUSED)
            return FrameLine(type="done", title=titles[result.status], body=body, failed=failed)
        case ErrorFrame(error=error):
            return FrameLine(type="error", title=error.code, body=error.message, failed=True)
        case PlaceholderFrame(text=text):
            # A resumed segment's opening names the decision it applies.
            return FrameLine(type="placeholder", title="Resumed" if text else "Working", body=text)
    raise AssertionError(f"unknown frame {frame!r}")


def frame_lines(events: Iterable[JobEvent]) -> list[FrameLine]:
    """The log so far. A streaming model sends its answer a few tokens per frame: consecutive
    answer frames make one line, as the live script joins them too. An empty "Working" or
    "Thinking" frame only said the model was busy at the time: the log leaves it out."""
    lines: list[FrameLine] = []
    for event in events:
        if event.frame is None:
            continue
        line = frame_line(event.frame)
        if line.type in ("placeholder", "thinking") and not line.body:
            continue
        if line.type == "chunk" and lines and lines[-1].type == "chunk":
            lines[-1] = lines[-1].model_copy(update={"body": lines[-1].body + line.body})
        else:
            lines.append(line)
    return lines
