"""Lifecycle hooks: when each fires, what it gets, and what it may change."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import JsonValue

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.scripted import ScriptedClient
from bot.core.errors import BeamError
from bot.core.frames import AgentResult, DoneFrame, Frame, ResultStatus, ToolCallRecord
from bot.core.input import AgentContext
from bot.core.tools import ToolSpec
from bot.runner import CallDecision, Hooks, RunState, ToolLoopAgent
from tests.runner.kit import (
    call,
    calls,
    collect,
    echo_tool,
    frames_of,
    kinds,
    publisher,
    request,
    result_of,
)


def echo_then_answer() -> ScriptedClient:
    return ScriptedClient([calls(call("echo", "c1", text="hi")), "Done."])


def recording_hooks(log: list[str]) -> Hooks:
    hooks = Hooks()

    @hooks.before_completion
    async def before_completion(
        state: RunState, messages: list[Message], specs: list[ToolSpec]
    ) -> None:
        log.append(f"before_completion {state.rounds} {len(messages)} {[s.name for s in specs]}")

    @hooks.after_completion
    async def after_completion(state: RunState, completion: Completion) -> None:
        log.append(f"after_completion {[c.id for c in completion.tool_calls]} {completion.text}")

    @hooks.before_tool
    async def before_tool(state: RunState, call: ToolCall, args: dict[str, JsonValue]) -> None:
        log.append(f"before_tool {call.id} {args}")

    @hooks.after_tool
    async def after_tool(state: RunState, record: ToolCallRecord) -> None:
        log.append(f"after_tool {record.id} {record.ok} {len(state.records)}")

    @hooks.on_frame
    async def on_frame(frame: Frame) -> None:
        log.append(f"frame {frame.type}")

    @hooks.on_stop
    async def on_stop(state: RunState, result: AgentResult) -> None:
        log.append(f"stop {result.status.value} {state.status}")

    return hooks


async def test_each_hook_fires_in_order_with_its_arguments() -> None:
    log: list[str] = []
    agent = ToolLoopAgent("helper", echo_then_answer(), [echo_tool()], hooks=recording_hooks(log))
    await frames_of(agent)

    assert log == [
        "frame placeholder",
        "frame thinking",
        "before_completion 1 1 ['echo']",
        "after_completion ['c1'] None",
        "before_tool c1 {'text': 'hi'}",
        "after_tool c1 True 1",
        "frame tool",
        "before_completion 2 3 ['echo']",
        "after_completion [] Done.",
        "frame chunk",
        "stop completed completed",
        "frame done",
    ]


async def test_hooks_of_one_kind_run_in_registration_order() -> None:
    log: list[str] = []
    hooks = Hooks()
    for name in ("first", "second", "third"):

        async def remember(frame: Frame, name: str = name) -> None:
            if frame.type == "done":
                log.append(name)

        hooks.on_frame(remember)
    await frames_of(ToolLoopAgent("helper", ScriptedClient(["ok"]), [], hooks=hooks))

    assert log == ["first", "second", "third"]


async def test_before_completion_edits_reach_one_request_and_never_the_history() -> None:
    hooks = Hooks()

    @hooks.before_completion
    async def remind(state: RunState, messages: list[Message], specs: list[ToolSpec]) -> None:
        messages.append({"role": "user", "content": "Answer in one line."})
        messages[0]["content"] = "tampered"
        specs.clear()

    client = echo_then_answer()
    agent = ToolLoopAgent("helper", client, [echo_tool()], hooks=hooks)
    state = agent.start(request("Original."), AgentContext())
    await collect(agent.run(state))

    for messages, specs in client.requests:
        assert specs == []
        assert messages[-1] == {"role": "user", "content": "Answer in one line."}
        assert [m["content"] for m in messages].count("Answer in one line.") == 1
    assert state.messages[0] == {"role": "user", "content": "Original."}
    assert all(m.get("content") != "Answer in one line." for m in state.messages)


async def test_after_completion_can_replace_what_the_loop_acts_on() -> None:
    hooks = Hooks()

    @hooks.after_completion
    async def keep(state: RunState, completion: Completion) -> None:
        return None

    @hooks.after_completion
    async def rewrite(state: RunState, completion: Completion) -> Completion:
        return completion.model_copy(update={"text": "Rewritten."})

    agent = ToolLoopAgent("helper", ScriptedClient(["Raw."]), [], hooks=hooks)
    state = agent.start(request(), AgentContext())
    result = result_of(await collect(agent.run(state)))

    assert result.text == "Rewritten."
    assert state.messages[-1] == {"role": "assistant", "content": "Rewritten."}


async def test_after_completion_can_turn_calls_into_an_answer() -> None:
    hooks = Hooks()

    @hooks.after_completion
    async def no_tools(state: RunState, completion: Completion) -> Completion:
        return Completion.of_text("No tools today.", model=completion.model)

    tool = echo_tool()
    agent = ToolLoopAgent("helper", echo_then_answer(), [tool], hooks=hooks)
    result = result_of(await frames_of(agent))

    assert (result.text, result.tool_calls, tool.calls) == ("No tools today.", [], [])


async def test_before_tool_can_refuse_a_call_as_policy(tmp_path: Path) -> None:
    hooks = Hooks()

    @hooks.before_tool
    async def protect(state: RunState, call: ToolCall, args: dict[str, JsonValue]) -> None:
        if args.get("text") == "main":
            raise BeamError("BEM-328", "main is protected; use a change branch")

    tool = echo_tool()
    client = ScriptedClient([calls(call("echo", "c1", text="main")), "I will not."])
    agent = ToolLoopAgent("helper", client, [tool], hooks=hooks)
    result = result_of(await frames_of(agent))

    assert tool.calls == []
    assert result.status is ResultStatus.COMPLETED
    assert result.tool_calls[0].error is not None
    assert result.tool_calls[0].error.code == "BEM-328"
    reply = json.loads(client.requests[1][0][-1]["content"])
    assert reply["error"]["code"] == "BEM-328"


async def test_on_frame_sees_every_frame_in_order() -> None:
    seen: list[Frame] = []
    hooks = Hooks()

    @hooks.on_frame
    async def publish(frame: Frame) -> None:
        seen.append(frame)

    agent = ToolLoopAgent("helper", echo_then_answer(), [echo_tool()], hooks=hooks)
    frames = await frames_of(agent)

    assert seen == frames
    assert kinds(seen) == ["placeholder", "thinking", "tool", "chunk", "done"]


async def test_on_stop_fires_once_per_segment(tmp_path: Path) -> None:
    stops: list[tuple[str, str | None]] = []
    hooks = Hooks()

    @hooks.on_stop
    async def saved(state: RunState, result: AgentResult) -> None:
        pending = result.pending.id if result.pending else None
        stops.append((result.status.value, pending))

    client = ScriptedClient([calls(call("push", "p1", ref="x")), "ok"])
    agent = publisher(client, tmp_path / "pushed.json", hooks=hooks)
    state = agent.start(request(), AgentContext())
    await collect(agent.run(state))
    await collect(agent.resume(state, CallDecision(call_id="p1", approved=True)))

    assert stops == [("interrupted", "p1"), ("completed", None)]


async def test_a_hook_bug_fails_the_run_with_bem_095() -> None:
    hooks = Hooks()

    @hooks.before_tool
    async def buggy(state: RunState, call: ToolCall, args: dict[str, JsonValue]) -> None:
        raise RuntimeError("policy table missing")

    tool = echo_tool()
    frames = await frames_of(ToolLoopAgent("helper", echo_then_answer(), [tool], hooks=hooks))
    result = result_of(frames)

    assert kinds(frames) == ["placeholder", "thinking", "done"]
    assert tool.calls == []
    assert result.error is not None and result.error.code == "BEM-095"
    assert "before_tool" in result.error.message and "buggy" in result.error.message
    assert "RuntimeError: policy table missing" in result.error.message


async def test_a_beam_error_from_a_hook_stops_the_run_with_its_code() -> None:
    hooks = Hooks()

    @hooks.before_completion
    async def budget(state: RunState, messages: list[Message], specs: list[ToolSpec]) -> None:
        if state.rounds > 1:
            raise BeamError("BEM-900", "the job's token budget is spent")

    client = echo_then_answer()
    result = result_of(await frames_of(ToolLoopAgent("helper", client, [echo_tool()], hooks=hooks)))

    assert len(client.requests) == 1
    assert result.error is not None and result.error.code == "BEM-900"
    assert len(result.tool_calls) == 1


async def test_a_failing_stop_hook_fails_the_run(tmp_path: Path) -> None:
    hooks = Hooks()

    @hooks.on_stop
    async def save(state: RunState, result: AgentResult) -> None:
        raise ConnectionError("redis is down")

    client = ScriptedClient([calls(call("push", "p1", ref="x"))])
    agent = publisher(client, tmp_path / "pushed.json", hooks=hooks)
    state = agent.start(request(), AgentContext())
    result = result_of(await collect(agent.run(state)))

    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "BEM-095"
    assert result.pending is None and state.pending is None, "an unsaved park cannot resume"


async def test_a_frame_hook_failing_on_the_done_frame_still_ends_with_one_done_frame() -> None:
    hooks = Hooks()

    @hooks.on_frame
    async def publish(frame: Frame) -> None:
        if isinstance(frame, DoneFrame):
            raise OSError("stream closed")

    frames = await frames_of(ToolLoopAgent("helper", ScriptedClient(["ok"]), [], hooks=hooks))
    result = result_of(frames)

    assert kinds(frames) == ["placeholder", "thinking", "chunk", "done"]
    assert result.status is ResultStatus.FAILED
    assert result.error is not None and "OSError: stream closed" in result.error.message


async def test_a_later_failure_keeps_the_first_code() -> None:
    hooks = Hooks()

    @hooks.on_stop
    async def save(state: RunState, result: AgentResult) -> None:
        raise BeamError("BEM-900", "could not save")

    frames = await frames_of(ToolLoopAgent("helper", ScriptedClient([]), [], hooks=hooks))
    error = result_of(frames).error

    assert error is not None and error.code == "BEM-081"
    assert "BEM-900: could not save" in error.message
