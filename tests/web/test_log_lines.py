"""The log a job page shows: what a finished job's page keeps of its frames."""

from __future__ import annotations

from bot.core.frames import ChunkFrame, PlaceholderFrame, ThinkingFrame
from bot.store.models import JobEvent
from bot.web.present import frame_lines


def test_empty_working_and_thinking_frames_leave_no_card_and_the_rest_stay() -> None:
    frames = [
        PlaceholderFrame(),
        ThinkingFrame(),
        ThinkingFrame(text="the install page first"),
        PlaceholderFrame(text="approved by ann"),
        ChunkFrame(text="Done."),
    ]
    events = [JobEvent(id=f"{n}-0", frame=frame) for n, frame in enumerate(frames)]
    assert [(line.title, line.body) for line in frame_lines(events)] == [
        ("Thinking", "the install page first"),
        ("Resumed", "approved by ann"),
        ("Answer", "Done."),
    ]
