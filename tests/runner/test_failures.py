"""A failing tool call goes back to the model; only a call that keeps failing ends the run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import JsonValue

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.scripted import ScriptedClient
from bot.core import jsonlimits
from bot.core.errors import BeamError
from bot.core.frames import AgentResult, ResultStatus, ToolFrame, frame_adapter
from bot.core.tools import Tool, ToolSpec
from bot.runner import ToolLoopAgent
from bot.runner.budget import NO_BUDGET
from bot.runner.calls import MAX_RECORDED_TEXT
from tests.runner.kit import (
    FnTool,
    call,
    calls,
    echo_tool,
    failing_tool,
    frames_of,
    result_of,
    spec,
)


async def run(client: ScriptedClient, tools: list[Tool], **options: Any) -> AgentResult:
    agent = ToolLoopAgent("helper", client, tools, **options)  # type: ignore[arg-type]
    return result_of(await frames_of(agent))


def tool_reply(client: ScriptedClient, request_index: int, call_id: str) -> object:
    """What the model read as the result of one call, in one of the requests it got."""
    messages = client.requests[request_index][0]
    reply = next(m for m in messages if m.get("tool_call_id") == call_id)
    return json.loads(reply["content"])


def error_code(client: ScriptedClient, request_index: int, call_id: str) -> str:
    reply = tool_reply(client, request_index, call_id)
    assert isinstance(reply, dict)
    return str(reply["error"]["code"])


async def test_an_unknown_tool_is_a_failed_result_the_model_can_fix() -> None:
    client = ScriptedClient(
        [calls(call("ecko", "c1", text="hi")), calls(call("echo", "c2", text="hi")), "Done."]
    )
    result = await run(client, [echo_tool()])

    assert result.status is ResultStatus.COMPLETED
    assert [(r.name, r.ok) for r in result.tool_calls] == [("ecko", False), ("echo", True)]
    assert result.tool_calls[0].error is not None
    assert result.tool_calls[0].error.code == "BEM-089"
    reply = tool_reply(client, 1, "c1")
    assert isinstance(reply, dict)
    assert reply["error"]["code"] == "BEM-089"
    assert "echo" in reply["error"]["message"], "the model is told which tools exist"


async def test_an_unknown_tool_called_again_and_again_fails_the_run_with_bem_089() -> None:
    client = ScriptedClient([calls(call("ecko", f"c{i}", text="hi")) for i in range(5)])
    result = await run(client, [echo_tool()])

    # tool_retry_limit=2: the first failure and two retries go back to the model; the third
    # failure of the same call ends the run.
    assert len(client.requests) == 3
    assert len(result.tool_calls) == 3
    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "BEM-089"
    assert "3 times" in result.error.message and "tool_retry_limit=2" in result.error.message


async def test_the_retry_limit_is_configurable() -> None:
    client = ScriptedClient([calls(call("ecko", f"c{i}")) for i in range(5)])
    result = await run(client, [echo_tool()], tool_retry_limit=0)

    assert len(client.requests) == 1
    assert result.error is not None and result.error.code == "BEM-089"


async def test_invalid_json_arguments_are_a_bem_090_result_the_model_can_fix() -> None:
    client = ScriptedClient(
        [
            calls(ToolCall(id="c1", name="echo", arguments='{"text": "hi"')),
            calls(call("echo", "c2", text="hi")),
            "Done.",
        ]
    )
    result = await run(client, [echo_tool()])

    assert result.status is ResultStatus.COMPLETED
    assert error_code(client, 1, "c1") == "BEM-090"
    assert result.tool_calls[0].arguments == '{"text": "hi"', "the raw text is kept"


async def test_arguments_that_break_the_schema_are_a_bem_090_result_the_model_can_fix() -> None:
    tool = echo_tool()
    client = ScriptedClient(
        [calls(call("echo", "c1", text=3)), calls(call("echo", "c2", text="3")), "Done."]
    )
    result = await run(client, [tool])

    assert result.status is ResultStatus.COMPLETED
    assert error_code(client, 1, "c1") == "BEM-090"
    assert tool.calls == [{"text": "3"}], "the tool never saw the invalid arguments"


async def test_arguments_that_are_not_an_object_are_bem_090() -> None:
    client = ScriptedClient([calls(ToolCall(id="c1", name="echo", arguments="[1]")), "Done."])
    await run(client, [echo_tool()])

    assert error_code(client, 1, "c1") == "BEM-090"


async def test_a_tool_beam_error_is_a_failed_result_with_its_code() -> None:
    tool = failing_tool(BeamError("BEM-303", "docs/x.md resolves outside the root"))
    client = ScriptedClient([calls(call("flaky", "c1", path="docs/x.md")), "I could not."])
    result = await run(client, [tool])

    assert result.status is ResultStatus.COMPLETED
    assert tool_reply(client, 1, "c1") == {
        "error": {"code": "BEM-303", "message": "docs/x.md resolves outside the root"}
    }
    assert result.tool_calls[0].ok is False


async def test_any_other_tool_exception_is_a_bem_100_result_naming_it() -> None:
    client = ScriptedClient([calls(call("flaky", "c1", path="a")), "I could not."])
    result = await run(client, [failing_tool(ValueError("disk on fire"))])

    reply = tool_reply(client, 1, "c1")
    assert isinstance(reply, dict)
    assert reply["error"]["code"] == "BEM-100"
    assert "ValueError" in reply["error"]["message"]
    assert "disk on fire" in reply["error"]["message"]
    assert result.status is ResultStatus.COMPLETED


async def test_a_tool_that_keeps_failing_ends_the_run_with_its_own_code() -> None:
    client = ScriptedClient([calls(call("flaky", f"c{i}", path="a")) for i in range(5)])
    result = await run(client, [failing_tool(BeamError("BEM-305", "not a regular file"))])

    assert len(client.requests) == 3
    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "BEM-305"
    assert "not a regular file" in result.error.message


async def test_a_tool_that_keeps_raising_ends_the_run_with_bem_100() -> None:
    client = ScriptedClient([calls(call("flaky", f"c{i}", path="a")) for i in range(5)])
    result = await run(client, [failing_tool(RuntimeError("boom"))])

    assert result.error is not None and result.error.code == "BEM-100"


async def test_the_same_call_means_same_tool_and_same_arguments() -> None:
    # Different paths are different calls, so three failures on three paths are fine; the key
    # order of the arguments does not make a call different.
    client = ScriptedClient(
        [
            calls(call("flaky", "c1", path="a")),
            calls(call("flaky", "c2", path="b")),
            calls(call("flaky", "c3", path="c")),
            calls(ToolCall(id="c4", name="flaky", arguments='{ "path" : "a" }')),
            calls(call("flaky", "c5", path="a")),
            "Giving up politely.",
        ]
    )
    result = await run(client, [failing_tool(BeamError("BEM-305", "no"))])

    assert result.status is ResultStatus.FAILED
    assert len(client.requests) == 5, "the third failure of path=a ends the run"


async def test_a_result_that_is_not_json_is_bem_101() -> None:
    async def work(args: dict[str, JsonValue]) -> Any:
        return {"when": object()}

    client = ScriptedClient([calls(call("odd", "c1")), "ok"])
    await run(client, [FnTool(spec("odd"), work)])

    assert error_code(client, 1, "c1") == "BEM-101"


async def test_a_failed_call_has_a_tool_frame_too() -> None:
    client = ScriptedClient([calls(call("ecko", "c1")), "ok"])
    agent = ToolLoopAgent("helper", client, [echo_tool()])
    frames = await frames_of(agent)
    tool_frames = [frame for frame in frames if isinstance(frame, ToolFrame)]

    assert len(tool_frames) == 1
    assert tool_frames[0].record.error is not None
    assert tool_frames[0].record.error.code == "BEM-089"


class _TimedOutClient:
    """A model call under way when the worker's soft time limit fires."""

    model = "timed-out"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        raise SoftTimeLimitExceeded()


async def test_a_soft_time_limit_in_a_model_call_stops_the_run_instead_of_failing_it() -> None:
    # Not BEM-096 ("the model client has a bug"): the run is stopped from outside, and the
    # job's worker reports it as its time limit (BEM-505).
    agent = ToolLoopAgent("helper", _TimedOutClient(), [echo_tool()])
    with pytest.raises(SoftTimeLimitExceeded):
        await frames_of(agent)


async def test_a_soft_time_limit_in_a_tool_call_stops_the_run_not_just_the_call() -> None:
    # Not a failed call handed back to the model: the run must not go on past its limit.
    client = ScriptedClient([calls(call("flaky", "c1", path="docs/install.md")), "Done."])
    with pytest.raises(SoftTimeLimitExceeded):
        await run(client, [failing_tool(SoftTimeLimitExceeded())])
    assert len(client.requests) == 1


@pytest.mark.parametrize("depth", [33, 210, 5000])
async def test_arguments_nested_too_deep_are_bem_090_and_their_frame_reads_back(
    depth: int,
) -> None:
    """A model that nests its arguments deeper than any reader goes cannot hide the call:
    it is refused, and its record keeps the raw text, which reads back like any frame."""
    nested = "[" * depth + "]" * depth
    deep = ToolCall(id="c1", name="echo", arguments=f'{{"text": {nested}}}')
    client = ScriptedClient([calls(deep), "Done."])
    agent = ToolLoopAgent("helper", client, [echo_tool()])
    frames = await frames_of(agent)

    assert error_code(client, 1, "c1") == "BEM-090"
    record = next(frame.record for frame in frames if isinstance(frame, ToolFrame))
    assert isinstance(record.arguments, str) and record.arguments.startswith('{"text": [[[')
    assert len(record.arguments) <= MAX_RECORDED_TEXT
    for frame in frames:
        assert frame_adapter.validate_json(frame_adapter.dump_json(frame)) == frame


async def test_arguments_over_the_size_limit_are_bem_090() -> None:
    huge = json.dumps({"text": "x" * (jsonlimits.MAX_BYTES + 1)})
    client = ScriptedClient([calls(ToolCall(id="c1", name="echo", arguments=huge)), "Done."])
    # No budget: with one, the next request (which carries the call) would never be sent.
    result = await run(client, [echo_tool()], budget=NO_BUDGET)

    assert error_code(client, 1, "c1") == "BEM-090"
    assert len(str(result.tool_calls[0].arguments)) <= MAX_RECORDED_TEXT
