"""Small tools and helpers the runner tests share (also imported by ``resume_child.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from bot.clients.base import Completion, CompletionClient, ToolCall
from bot.core.agent import Agent
from bot.core.frames import AgentResult, DoneFrame, Frame, Usage
from bot.core.input import AgentContext, AgentInput
from bot.core.tools import ToolSpec, json_params
from bot.runner import ToolLoopAgent

Invoke = Callable[[dict[str, JsonValue]], Awaitable[Any]]


class FnTool:
    """A tool whose work is an async function; it remembers the arguments of every call."""

    def __init__(self, spec: ToolSpec, work: Invoke) -> None:
        self._spec = spec
        self._work = work
        self.calls: list[dict[str, JsonValue]] = []

    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        self.calls.append(args)
        result: JsonValue = await self._work(args)
        return result


def spec(name: str, *, confirm: bool = False, **properties: str) -> ToolSpec:
    """A spec whose arguments are all required and typed as ``properties`` says."""
    schema = {key: {"type": kind} for key, kind in properties.items()}
    return ToolSpec(
        name=name,
        description=f"The {name} tool.",
        confirm_required=confirm,
        parameters=json_params(schema, list(schema)),
    )


def echo_tool() -> FnTool:
    async def work(args: dict[str, JsonValue]) -> JsonValue:
        return {"echo": args["text"]}

    return FnTool(spec("echo", text="string"), work)


def failing_tool(error: Exception, name: str = "flaky") -> FnTool:
    async def work(args: dict[str, JsonValue]) -> JsonValue:
        raise error

    return FnTool(spec(name, path="string"), work)


def push_tool(side_effect: Path) -> FnTool:
    """A confirm_required tool whose side effect a test (or another process) can see."""

    async def work(args: dict[str, JsonValue]) -> JsonValue:
        side_effect.write_text(json.dumps(args))
        return {"pushed": args["ref"]}

    return FnTool(spec("push", confirm=True, ref="string"), work)


def call(name: str, id: str, **arguments: Any) -> ToolCall:
    return ToolCall.of(name, arguments, id=id)


def calls(*tool_calls: ToolCall, tokens: int = 0, model: str | None = None) -> Completion:
    usage = Usage(prompt_tokens=tokens, completion_tokens=1, total_tokens=tokens + 1)
    return Completion.of_calls(*tool_calls, usage=usage if tokens else None, model=model)


def request(text: str = "Fix the install page.", **fields: Any) -> AgentInput:
    return AgentInput.of_text(text, **fields)


async def collect(frames: AsyncIterator[Frame]) -> list[Frame]:
    return [frame async for frame in frames]


async def frames_of(agent: Agent, text: str = "Fix the install page.") -> list[Frame]:
    """Every frame of one run of ``agent`` on ``text``, with no earlier turns."""
    return await collect(agent.stream(request(text), AgentContext()))


def result_of(frames: list[Frame]) -> AgentResult:
    """The result of the one done frame, which must be the last frame."""
    done = [frame for frame in frames if isinstance(frame, DoneFrame)]
    assert len(done) == 1, f"expected exactly one done frame, got {len(done)}"
    assert frames[-1] is done[0], "the done frame must be the last frame"
    return done[0].result


def kinds(frames: list[Frame]) -> list[str]:
    return [frame.type for frame in frames]


def publisher(client: CompletionClient, side_effect: Path, **options: Any) -> ToolLoopAgent:
    """The agent the park-and-resume tests build, the same way in every process."""
    return ToolLoopAgent("publisher", client, [echo_tool(), push_tool(side_effect)], **options)
