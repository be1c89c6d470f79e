"""The tool loop: frames, messages, usage, the round limit, and the Agent contract."""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from bot.clients.base import Completion
from bot.clients.scripted import ScriptedClient
from bot.core.agent import Agent
from bot.core.errors import BeamError
from bot.core.frames import ChunkFrame, ResultStatus, ToolFrame, Usage
from bot.core.input import AgentContext
from bot.runner import ToolLoopAgent
from tests.runner.kit import (
    call,
    calls,
    collect,
    echo_tool,
    frames_of,
    kinds,
    request,
    result_of,
)

TEXT = "Fix the install page, please."


async def test_a_text_answer_streams_placeholder_thinking_chunk_done() -> None:
    agent = ToolLoopAgent("helper", ScriptedClient(["All fixed."]), [])
    frames = await frames_of(agent, TEXT)

    assert kinds(frames) == ["placeholder", "thinking", "chunk", "done"]
    assert frames[2] == ChunkFrame(text="All fixed.")
    result = result_of(frames)
    assert result.status is ResultStatus.COMPLETED
    assert (result.text, result.error) == ("All fixed.", None)


async def test_a_tool_run_yields_one_tool_frame_per_call_then_the_answer() -> None:
    tool = echo_tool()
    client = ScriptedClient([calls(call("echo", "c1", text="hi")), "Done."])
    frames = await frames_of(ToolLoopAgent("helper", client, [tool]))

    assert kinds(frames) == ["placeholder", "thinking", "tool", "chunk", "done"]
    assert isinstance(frames[2], ToolFrame)
    assert frames[2].record.result == {"echo": "hi"}
    assert tool.calls == [{"text": "hi"}]


async def test_the_whole_result_of_a_tool_run() -> None:
    client = ScriptedClient(
        [
            calls(call("echo", "c1", text="one"), tokens=10, model="m-1"),
            Completion.of_text("Both echoed.", usage=Usage(total_tokens=5), model="m-2"),
        ]
    )
    frames = await frames_of(ToolLoopAgent("helper", client, [echo_tool()]))
    result = result_of(frames).model_dump(mode="json")
    for record in result["tool_calls"]:
        assert record.pop("duration_ms") >= 0

    assert result == {
        "status": "completed",
        "text": "Both echoed.",
        "tool_calls": [
            {
                "id": "c1",
                "name": "echo",
                "arguments": {"text": "one"},
                "ok": True,
                "result": {"echo": "one"},
                "error": None,
                "sent_id": None,
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "total_tokens": 16,
            "cached_tokens": 0,
            "reasoning_tokens": 0,
            "unreported_requests": 0,
        },
        "model_used": "m-2",
        "pending": None,
        "error": None,
        "refusal": None,
    }


async def test_every_request_carries_the_latest_user_message_exactly_once() -> None:
    history: list[dict[str, JsonValue]] = [
        {"role": "user", "content": "What is Riverbeam?"},
        {"role": "assistant", "content": "A docs bot."},
    ]
    client = ScriptedClient(
        [calls(call("echo", "c1", text="x")), calls(call("echo", "c2", text="y")), "Done."]
    )
    agent = ToolLoopAgent("helper", client, [echo_tool()])
    await collect(agent.stream(request(TEXT), AgentContext(history=history)))

    assert len(client.requests) == 3
    for messages, _ in client.requests:
        assert sum(json.dumps(message).count(TEXT) for message in messages) == 1
        assert messages[:2] == history
        assert messages[2] == {"role": "user", "content": TEXT}
        assert [m["role"] for m in messages].count("user") == 2


async def test_history_is_copied_not_shared() -> None:
    history: list[dict[str, object]] = [{"role": "user", "content": "earlier"}]
    context = AgentContext.model_validate({"history": history})
    state = ToolLoopAgent("helper", ScriptedClient(["ok"]), []).start(request(), context)
    state.messages[0]["content"] = "edited"

    assert context.history[0]["content"] == "earlier"


async def test_without_a_skill_there_is_no_system_message() -> None:
    client = ScriptedClient(["ok"])
    await frames_of(ToolLoopAgent("helper", client, []), TEXT)

    assert client.requests[0][0] == [{"role": "user", "content": TEXT}]


async def test_usage_is_summed_and_the_last_model_is_reported() -> None:
    client = ScriptedClient(
        [
            calls(call("echo", "c1", text="a"), tokens=100, model="m-1"),
            calls(call("echo", "c2", text="b")),  # no usage reported: counted as such
            Completion.of_text("done", usage=Usage(prompt_tokens=7, total_tokens=9), model="m-2"),
        ]
    )
    frames = await frames_of(ToolLoopAgent("helper", client, [echo_tool()]))
    result = result_of(frames)

    assert result.usage == Usage(
        prompt_tokens=107, completion_tokens=1, total_tokens=110, unreported_requests=1
    )
    assert result.model_used == "m-2"


async def test_several_calls_in_one_completion_run_in_order() -> None:
    tool = echo_tool()
    client = ScriptedClient(
        [calls(call("echo", "c1", text="1"), call("echo", "c2", text="2")), "Done."]
    )
    frames = await frames_of(ToolLoopAgent("helper", client, [tool]))

    assert kinds(frames) == ["placeholder", "thinking", "tool", "tool", "chunk", "done"]
    assert tool.calls == [{"text": "1"}, {"text": "2"}]
    second_request = client.requests[1][0]
    assert [m["role"] for m in second_request] == ["user", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in second_request[2:]] == ["c1", "c2"]
    assert json.loads(second_request[3]["content"]) == {"echo": "2"}


def endless(count: int) -> ScriptedClient:
    return ScriptedClient([calls(call("echo", f"c{i}", text=str(i))) for i in range(count)])


async def test_the_round_limit_is_eight_by_default() -> None:
    client = endless(20)
    frames = await frames_of(ToolLoopAgent("helper", client, [echo_tool()]))
    result = result_of(frames)

    assert len(client.requests) == 8
    assert result.status is ResultStatus.FAILED
    assert result.error is not None
    assert result.error.code == "BEM-088"
    assert "8" in result.error.message and "max_rounds" in result.error.message
    assert len(result.tool_calls) == 8


async def test_the_round_limit_is_configurable() -> None:
    client = endless(20)
    agent = ToolLoopAgent("helper", client, [echo_tool()], max_rounds=3)
    result = result_of(await frames_of(agent))

    assert len(client.requests) == 3
    assert result.error is not None and result.error.code == "BEM-088"


async def test_an_answer_in_the_last_allowed_round_completes() -> None:
    client = ScriptedClient([calls(call("echo", "c1", text="a")), "Done."])
    agent = ToolLoopAgent("helper", client, [echo_tool()], max_rounds=2)
    result = result_of(await frames_of(agent))

    assert result.status is ResultStatus.COMPLETED


async def test_a_model_error_fails_the_run_with_its_code_in_a_done_frame() -> None:
    client = ScriptedClient([BeamError("BEM-062", "the endpoint kept failing")])
    frames = await frames_of(ToolLoopAgent("helper", client, []))

    assert kinds(frames) == ["placeholder", "thinking", "done"]
    error = result_of(frames).error
    assert error is not None
    assert (error.code, error.message) == ("BEM-062", "the endpoint kept failing")


async def test_a_client_that_runs_out_fails_with_bem_081() -> None:
    frames = await frames_of(ToolLoopAgent("helper", ScriptedClient([]), []))
    result = result_of(frames)

    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "BEM-081"


class BrokenClient:
    async def complete(self, messages: object, tools: object) -> Completion:
        raise KeyError("choices")


async def test_a_client_bug_fails_the_run_with_bem_096() -> None:
    frames = await frames_of(ToolLoopAgent("helper", BrokenClient(), []))
    error = result_of(frames).error

    assert error is not None and error.code == "BEM-096"
    assert "KeyError" in error.message


async def test_the_agent_meets_the_agent_protocol() -> None:
    agent = ToolLoopAgent("helper", ScriptedClient([]), [echo_tool()], description="Helps.")

    assert isinstance(agent, Agent)
    assert await agent.health_check() is True
    metadata = agent.metadata()
    assert (metadata.name, metadata.description) == ("helper", "Helps.")
    assert metadata.tags == ("tool-loop",)
    assert [spec.name for spec in agent.tools] == ["echo"]


def test_duplicate_tool_names_are_refused() -> None:
    with pytest.raises(ValueError, match="'echo'"):
        ToolLoopAgent("helper", ScriptedClient([]), [echo_tool(), echo_tool()])


@pytest.mark.parametrize(("option", "value"), [("max_rounds", 0), ("tool_retry_limit", -1)])
def test_limits_are_checked(option: str, value: int) -> None:
    with pytest.raises(ValueError, match=option):
        ToolLoopAgent("helper", ScriptedClient([]), [], **{option: value})  # type: ignore[arg-type]


def test_a_bad_agent_name_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="name"):
        ToolLoopAgent("no spaces allowed", ScriptedClient([]), [])


async def test_an_empty_answer_fails_closed_without_a_chunk() -> None:
    frames = await frames_of(ToolLoopAgent("helper", ScriptedClient([Completion()]), []))
    result = result_of(frames)

    assert kinds(frames) == ["placeholder", "thinking", "done"]
    assert result.status is ResultStatus.FAILED and result.error is not None
    assert (result.error.code, result.text) == ("BEM-071", "")
