"""The hooks a segment runs its agent with."""

from __future__ import annotations

from typing import Any

from bot.core.frames import ChunkFrame, DoneFrame, Frame
from bot.core.tools import ToolSpec
from bot.jobs.lease import StopCheck
from bot.runner.hooks import Hooks
from bot.runner.state import RunState
from bot.store.store import JobStore
from sandbox.host.container.deferred import DeferredSandbox

CHUNK_EVENT_CHARS = 64
"""A streamed answer is published in events of at least this many characters (the last
piece, and any piece before another frame, may be shorter)."""


def segment_hooks(
    store: JobStore, job_id: str, stop: StopCheck, sandbox: DeferredSandbox | None
) -> Hooks:
    """The run's hooks: every frame to the job's event stream; before each model call and
    tool call the job is checked for a cancel (BEM-506) or a takeover (BEM-507), and the
    model call and each frame for a container start that failed."""
    hooks = Hooks()
    # A streamed answer comes a token or two per frame; its pieces are joined into
    # events of CHUNK_EVENT_CHARS or more, so a long answer neither floods the event
    # stream nor trims the job's earlier events out of it.
    answer: list[str] = []

    @hooks.on_frame
    async def publish(frame: Frame) -> None:
        if isinstance(frame, ChunkFrame):
            answer.append(frame.text)
            if sum(map(len, answer)) < CHUNK_EVENT_CHARS:
                return
        if answer:
            store.events.append(job_id, ChunkFrame(text="".join(answer)))
            answer.clear()
        if not isinstance(frame, ChunkFrame):
            store.events.append(job_id, frame)
        # A refused call (cancelled or taken over) ends the run at its tool frame; so
        # does a call that found the container's start failed.
        if not isinstance(frame, DoneFrame):
            stop.raise_if_stopped()
            if sandbox is not None:
                sandbox.raise_if_failed()

    @hooks.before_completion
    async def before_model(state: RunState, messages: list[Any], specs: list[ToolSpec]) -> None:
        stop.check()
        if sandbox is not None:
            sandbox.raise_if_failed()

    @hooks.before_tool
    async def before_tool(state: RunState, call: Any, args: Any) -> None:
        stop.check()

    return hooks
