"""Every way a reply can end, through the real client and a loopback provider, streamed and
not: a refusal, a content filter, the output-token limit (in text and mid-tool-call), an
unknown finish reason, and tool-call ids that are empty or reused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.clients import OpenAiCompatible
from bot.core.frames import ResultStatus, ToolFrame
from bot.runner import ToolLoopAgent
from harness.stub_model import Reply, StubModel, completion, streamed, tool_call
from tests.runner.kit import echo_tool, frames_of, result_of

STREAMED = [False, True]


def completion_doc(text: str | None, **fields: Any) -> Any:
    """The document ``completion`` serves, to serve whole or as a stream."""
    return completion(text, **fields).body


def serve(stub: StubModel, stream: bool, body: dict[str, Any]) -> None:
    stub.enqueue(streamed(body) if stream else Reply(body))


def agent(stub: StubModel, stream: bool, tools: list[Any]) -> ToolLoopAgent:
    client = OpenAiCompatible(stub.base_url, "", "m", max_retries=0)
    return ToolLoopAgent("helper", client, tools, stream_tokens=stream)


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_refusal_ends_the_run_as_refused_with_its_text_and_runs_nothing(
    stub_model: StubModel, stream: bool
) -> None:
    tool = echo_tool()
    body = completion_doc(
        None,
        refusal="I can't help with that.",
        tool_calls=[tool_call("echo", '{"text": "x"}')],
    )
    serve(stub_model, stream, body)

    result = result_of(await frames_of(agent(stub_model, stream, [tool])))

    assert result.status is ResultStatus.REFUSED
    assert result.refusal == "I can't help with that."
    assert (result.error, tool.calls, len(stub_model.requests)) == (None, [], 1)


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize(
    ("reason", "code", "says"),
    [
        ("content_filter", "BEM-066", "content filter"),
        ("length", "BEM-067", "model.max_output_tokens"),
        ("max_tokens", "BEM-067", "max_tokens=4096"),
        ("something_new", "BEM-068", "'something_new'"),
    ],
)
async def test_a_reply_that_did_not_end_on_its_own_fails_the_run_and_runs_nothing(
    stub_model: StubModel, stream: bool, reason: str, code: str, says: str
) -> None:
    tool = echo_tool()
    # The call is cut mid-arguments, as a length stop leaves it.
    cut = tool_call("echo", '{"text": "half a sen')
    serve(stub_model, stream, completion_doc("Partial", tool_calls=[cut], finish_reason=reason))

    frames = await frames_of(agent(stub_model, stream, [tool]))
    result = result_of(frames)

    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == code
    assert says in result.error.message and "1 tool call(s) (echo) were not run" in (
        result.error.message
    )
    # Never executed, never fed back: one paid request, no tool frame.
    assert tool.calls == [] and len(stub_model.requests) == 1
    assert not any(isinstance(frame, ToolFrame) for frame in frames)


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_text_reply_cut_at_the_limit_is_not_reported_as_an_answer(
    stub_model: StubModel, stream: bool
) -> None:
    serve(stub_model, stream, completion_doc("The install page says", finish_reason="length"))

    result = result_of(await frames_of(agent(stub_model, stream, [])))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "BEM-067"
    assert "after 7 tokens" in result.error.message


@pytest.mark.parametrize("stream", STREAMED)
async def test_empty_and_reused_tool_call_ids_are_made_unique_and_recorded(
    stub_model: StubModel, stream: bool
) -> None:
    def echo(word: str, call_id: str) -> dict[str, Any]:
        return tool_call("echo", json.dumps({"text": word}), call_id)

    first = [echo("a", "call_1"), echo("b", "call_1"), echo("c", "")]
    serve(stub_model, stream, completion_doc(None, tool_calls=first))
    # The next reply reuses an id from the round before.
    serve(stub_model, stream, completion_doc(None, tool_calls=[echo("d", "call_1")]))
    serve(stub_model, stream, completion_doc("done"))

    result = result_of(await frames_of(agent(stub_model, stream, [echo_tool()])))

    assert result.status is ResultStatus.COMPLETED
    ids = [record.id for record in result.tool_calls]
    assert len(set(ids)) == 4 and all(ids)
    assert [record.sent_id for record in result.tool_calls] == [None, "call_1", "", "call_1"]
    last = stub_model.requests[-1].json["messages"]
    asked = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert asked == answered == ids


@pytest.mark.parametrize("stream", STREAMED)
async def test_detailed_usage_is_kept(stub_model: StubModel, stream: bool) -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    serve(stub_model, stream, completion_doc("ok", usage=usage))

    result = result_of(await frames_of(agent(stub_model, stream, [])))

    assert (result.usage.cached_tokens, result.usage.reasoning_tokens) == (64, 30)
    assert result.usage.total_tokens == 140
