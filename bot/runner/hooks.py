"""Lifecycle hooks: the job layer publishes frames and enforces policy without subclassing.

Every hook is an async callable; hooks of one kind run in registration order. The
registration methods return the hook, so they also work as decorators::

    hooks = Hooks()

    @hooks.on_frame
    async def publish(frame: Frame) -> None:
        await events.publish(frame)

A hook that raises a ``BeamError`` stops the run with that code, except in ``before_tool``,
where it refuses one call: the model reads it as a failed tool result. Any other exception is
a bug in host code and stops the run with BEM-095, naming the hook.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import JsonValue

from bot.clients.base import Completion, Message, ToolCall
from bot.core.errors import BeamError
from bot.core.frames import AgentResult, Frame, ToolCallRecord
from bot.core.tools import ToolSpec
from bot.runner.interrupts import INTERRUPTS
from bot.runner.state import RunState

BeforeCompletion = Callable[[RunState, list[Message], list[ToolSpec]], Awaitable[None]]
"""Sees (and may edit) copies of the messages and specs of one request; the history keeps
its own."""

AfterCompletion = Callable[[RunState, Completion], Awaitable[Completion | None]]
"""Returns a ``Completion`` to replace the one the loop acts on, or ``None`` to keep it."""

BeforeTool = Callable[[RunState, ToolCall, dict[str, JsonValue]], Awaitable[None]]
"""Runs right before a tool runs, with the validated arguments; a ``BeamError`` refuses it."""

AfterTool = Callable[[RunState, ToolCallRecord], Awaitable[None]]
"""Sees the record of every processed call, failed or not, before its frame goes out."""

OnFrame = Callable[[Frame], Awaitable[None]]
"""Sees every frame of the run, in order, before the caller of ``run`` gets it."""

OnStop = Callable[[RunState, AgentResult], Awaitable[None]]
"""Fires once per run segment, with the result the done frame is about to carry."""

_Hook = TypeVar("_Hook")


class Hooks:
    """Lists of lifecycle hooks, and the code that runs them."""

    def __init__(self) -> None:
        self._before_completion: list[BeforeCompletion] = []
        self._after_completion: list[AfterCompletion] = []
        self._before_tool: list[BeforeTool] = []
        self._after_tool: list[AfterTool] = []
        self._on_frame: list[OnFrame] = []
        self._on_stop: list[OnStop] = []

    def before_completion(self, fn: BeforeCompletion) -> BeforeCompletion:
        return _append(self._before_completion, fn)

    def after_completion(self, fn: AfterCompletion) -> AfterCompletion:
        return _append(self._after_completion, fn)

    def before_tool(self, fn: BeforeTool) -> BeforeTool:
        return _append(self._before_tool, fn)

    def after_tool(self, fn: AfterTool) -> AfterTool:
        return _append(self._after_tool, fn)

    def on_frame(self, fn: OnFrame) -> OnFrame:
        return _append(self._on_frame, fn)

    def on_stop(self, fn: OnStop) -> OnStop:
        return _append(self._on_stop, fn)

    async def run_before_completion(
        self, state: RunState, messages: list[Message], specs: list[ToolSpec]
    ) -> None:
        for fn in self._before_completion:
            await _guard("before_completion", fn, state, messages, specs)

    async def run_after_completion(self, state: RunState, completion: Completion) -> Completion:
        # Each hook sees what the previous one left, so replacements compose in order.
        for fn in self._after_completion:
            replaced = await _guard("after_completion", fn, state, completion)
            if replaced is not None:
                completion = replaced
        return completion

    async def run_before_tool(
        self, state: RunState, call: ToolCall, args: dict[str, JsonValue]
    ) -> BeamError | None:
        """The refusal the first refusing hook raised, or ``None`` when all let it through."""
        for fn in self._before_tool:
            try:
                await fn(state, call, args)
            except BeamError as refusal:
                return refusal
            except INTERRUPTS:
                raise
            except Exception as error:
                raise _hook_bug("before_tool", fn, error) from error
        return None

    async def run_after_tool(self, state: RunState, record: ToolCallRecord) -> None:
        for fn in self._after_tool:
            await _guard("after_tool", fn, state, record)

    async def run_on_frame(self, frame: Frame) -> None:
        for fn in self._on_frame:
            await _guard("on_frame", fn, frame)

    async def run_on_stop(self, state: RunState, result: AgentResult) -> None:
        for fn in self._on_stop:
            await _guard("on_stop", fn, state, result)


def _append(hooks: list[_Hook], fn: _Hook) -> _Hook:
    hooks.append(fn)
    return fn


_Result = TypeVar("_Result")


async def _guard(kind: str, fn: Callable[..., Awaitable[_Result]], *args: object) -> _Result:
    """Run one hook; an exception that is not a ``BeamError`` becomes BEM-095."""
    try:
        return await fn(*args)
    except BeamError:
        raise
    except INTERRUPTS:
        raise
    except Exception as error:
        raise _hook_bug(kind, fn, error) from error


def _hook_bug(kind: str, fn: object, error: Exception) -> BeamError:
    name = getattr(fn, "__qualname__", repr(fn))
    return BeamError(
        "BEM-095",
        f"{kind} hook {name} raised {type(error).__name__}: {error}; "
        "fix the hook, or raise a BeamError from it to stop the run on purpose",
    )
