"""Conformance with the official ``openai`` package: every request the client sends in this
suite is validated strictly against ``openai.types.chat.completion_create_params``, and every
reply is built from its ``ChatCompletion`` / ``ChatCompletionChunk`` types and served from the
loopback stub. The counts of cases and validated requests are printed at the end of the run
(``harness/figures.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import JsonValue

from bot.clients import OpenAiCompatible
from bot.core.errors import ModelError
from bot.core.frames import ResultStatus
from bot.core.input import AgentContext
from bot.runner import ToolLoopAgent
from bot.runner.budget import ContextBudget
from harness import figures
from harness import openai_conformance as conformance
from harness.openai_conformance import chat_completion, check_request, chunk
from harness.stub_model import Hang, Reply, Stream, StubModel
from tests.clients.helpers import KEY, MESSAGES, READ_FILE, Sleeps
from tests.runner.kit import FnTool, collect, frames_of, result_of, spec
from tests.runner.kit import request as user_request

STREAMED = [False, True]


@pytest.fixture
def stub(request: pytest.FixtureRequest) -> Iterator[StubModel]:
    """The stub; once the case is over, every request it received is validated."""
    with StubModel() as running:
        yield running
    for sent in running.requests:
        check_request(sent.json)
    figures.count(request.node, "openai conformance cases")
    figures.count(
        request.node,
        "openai conformance requests validated against completion_create_params",
        len(running.requests),
    )


def client(stub: StubModel, sleeps: Sleeps | None = None, **options: Any) -> OpenAiCompatible:
    settings: dict[str, Any] = {"read_timeout": 2.0}
    if sleeps is not None:
        settings["sleep"] = sleeps
    return OpenAiCompatible(stub.base_url, KEY, "gpt-test", **(settings | options))


def as_stream(reply: dict[str, Any], pieces: int = 4) -> Stream:
    """The chunks a provider streams for ``reply``: text and refusal in ``pieces`` deltas,
    each call's arguments in ``pieces`` deltas interleaved by index, the finish reason, then
    a usage-only chunk."""
    choice = reply["choices"][0]
    message = choice["message"]
    events: list[Any] = []
    for name in ("content", "refusal"):
        for part in _split(message.get(name) or "", pieces):
            events.append(chunk(**{name: part}))
    calls = message.get("tool_calls") or []
    for index, call in enumerate(calls):
        events.append(chunk(tool_call=(index, call["id"], call["function"]["name"], "")))
    parts = [_split(call["function"]["arguments"], pieces) for call in calls]
    for step in range(max((len(p) for p in parts), default=0)):
        for index, split in enumerate(parts):
            if step < len(split):
                events.append(chunk(tool_call=(index, None, None, split[step])))
    events.append(chunk(finish_reason=choice["finish_reason"]))
    usage = reply["usage"]
    events.append(chunk(usage=(usage["prompt_tokens"], usage["completion_tokens"])))
    return Stream(events)


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces)) if text else 1
    return [text[i : i + size] for i in range(0, len(text), size)]


def serve(stub: StubModel, stream: bool, *replies: dict[str, Any]) -> None:
    stub.enqueue(*(as_stream(reply) if stream else Reply(reply) for reply in replies))


def lookup_tool(padding: int = 0) -> FnTool:
    async def work(args: dict[str, JsonValue]) -> JsonValue:
        return {"page": args["path"], "text": f"contents of {args['path']}" + "." * padding}

    return FnTool(spec("read_file", path="string"), work)


def agent(stub: StubModel, stream: bool, **options: Any) -> ToolLoopAgent:
    return ToolLoopAgent(
        "helper", client(stub, **options), [lookup_tool()], stream_tokens=stream, max_rounds=6
    )


# -- tool loops --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_multi_round_tool_loop(stub: StubModel, stream: bool) -> None:
    serve(
        stub,
        stream,
        chat_completion(tool_calls=[("call_a", "read_file", '{"path": "a.md"}')]),
        chat_completion("Let me check b.", tool_calls=[("call_b", "read_file", '{"path": "b"}')]),
        chat_completion("Both pages are fine."),
    )

    result = result_of(await frames_of(agent(stub, stream)))

    assert (result.status, result.text) == (ResultStatus.COMPLETED, "Both pages are fine.")
    last = stub.requests[-1].json["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert last[1]["content"] is None and last[2]["tool_call_id"] == "call_a"


@pytest.mark.parametrize("stream", STREAMED)
async def test_parallel_tool_calls_with_arguments_split_and_interleaved(
    stub: StubModel, stream: bool
) -> None:
    calls = [(f"call_{n}", "read_file", json.dumps({"path": f"page-{n}.md"})) for n in range(3)]
    serve(stub, stream, chat_completion(tool_calls=calls), chat_completion("done"))

    result = result_of(await frames_of(agent(stub, stream)))

    assert [record.arguments for record in result.tool_calls] == [
        {"path": f"page-{n}.md"} for n in range(3)
    ]
    answered = [
        m["tool_call_id"] for m in stub.requests[-1].json["messages"] if "tool_call_id" in m
    ]
    assert answered == ["call_0", "call_1", "call_2"]


async def test_arguments_in_many_one_character_chunks(stub: StubModel) -> None:
    arguments = json.dumps({"path": "docs/a-rather-long-page-name.md"})
    events: list[Any] = [chunk(tool_call=(0, "call_x", "read_file", ""))]
    events += [chunk(tool_call=(0, None, None, char)) for char in arguments]
    events += [chunk(finish_reason="tool_calls"), chunk(usage=(30, 9))]
    stub.enqueue(Stream(events))

    items = [item async for item in client(stub).stream(MESSAGES, [READ_FILE])]

    completion = items[-1]
    assert completion.tool_calls[0].arguments == arguments  # type: ignore[union-attr]
    assert completion.usage is not None and completion.usage.total_tokens == 39  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", STREAMED)
async def test_provider_extras_are_ignored(stub: StubModel, stream: bool) -> None:
    reply = chat_completion(
        "An answer.",
        extra_message={"reasoning_content": "thinking it over"},
        extra={"system_fingerprint": "fp", "x_vendor": {"latency_ms": 3}},
    )
    if stream:
        events = [chunk(extra_delta={"reasoning_content": "thinking"}), chunk(content="An ")]
        events += [chunk(content="answer.", extra_delta={"x_vendor": 1})]
        events += [chunk(finish_reason="stop"), chunk(usage=(4, 2))]
        stub.enqueue(Stream(events))
    else:
        stub.enqueue(Reply(reply))

    result = result_of(await frames_of(agent(stub, stream)))

    assert (result.status, result.text) == (ResultStatus.COMPLETED, "An answer.")


@pytest.mark.parametrize("stream", STREAMED)
async def test_requests_under_the_context_budget_stay_conformant(
    stub: StubModel, stream: bool
) -> None:
    # Results cut with a note, calls over the per-reply cap named in a note, older results
    # compacted into placeholders: still requests the official types accept.
    burst = [(f"call_{n}", "read_file", json.dumps({"path": f"p{n}.md"})) for n in range(6)]
    rounds = [
        chat_completion(tool_calls=[(f"r{n}", "read_file", '{"path": "x"}')]) for n in range(4)
    ]
    serve(stub, stream, chat_completion(tool_calls=burst), *rounds, chat_completion("done"))
    budget = ContextBudget(
        context_window=2_048, max_output_tokens=512, max_result_chars=500, max_calls_per_reply=4
    )
    helper = ToolLoopAgent(
        "helper", client(stub), [lookup_tool(800)], stream_tokens=stream, budget=budget
    )
    state = helper.start(user_request(), AgentContext())

    await collect(helper.run(state))

    assert state.status is ResultStatus.COMPLETED and len(stub.requests) == 6
    assert state.compacted and any(not record.ok for record in state.records)


# -- endings -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_refusal(stub: StubModel, stream: bool) -> None:
    serve(stub, stream, chat_completion(refusal="I can't help with that."))

    result = result_of(await frames_of(agent(stub, stream)))

    assert (result.status, result.refusal) == (ResultStatus.REFUSED, "I can't help with that.")


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (chat_completion("Partial", finish_reason="content_filter"), "BEM-066"),
        (chat_completion("The page says", finish_reason="length"), "BEM-067"),
        (
            chat_completion(
                tool_calls=[("call_cut", "read_file", '{"path": "docs/in')], finish_reason="length"
            ),
            "BEM-067",
        ),
    ],
)
async def test_content_filter_and_length_end_the_run_and_run_nothing(
    stub: StubModel, stream: bool, reply: dict[str, Any], code: str
) -> None:
    serve(stub, stream, reply)
    helper = agent(stub, stream)

    result = result_of(await frames_of(helper))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == code
    assert (result.tool_calls, len(stub.requests)) == ([], 1)


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize(
    "reply",
    [
        chat_completion(None, finish_reason="stop"),
        chat_completion(None, finish_reason="tool_calls"),
        chat_completion("  \n", finish_reason="stop"),
    ],
    ids=["stop with null content", "tool_calls with no calls", "stop with only whitespace"],
)
async def test_a_reply_of_nothing_fails_closed(
    stub: StubModel, stream: bool, reply: dict[str, Any]
) -> None:
    serve(stub, stream, reply)

    result = result_of(await frames_of(agent(stub, stream)))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "BEM-071"
    assert (result.text, len(stub.requests)) == ("", 1)


async def test_a_stream_that_sends_no_choice_fails_closed(stub: StubModel) -> None:
    stub.enqueue(Stream([chunk(usage=(12, 0))]))

    result = result_of(await frames_of(agent(stub, True)))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "BEM-071"


@pytest.mark.parametrize("ending", ["cut", "clean"])
async def test_a_stream_that_ends_after_its_finish_reason_keeps_the_answer(
    stub: StubModel, ending: str
) -> None:
    # The whole answer and its finish_reason, then the connection resets (or ends) before
    # the usage chunk and [DONE]: nothing of the answer was lost, so it is not asked again.
    events = [chunk(content="The page "), chunk(content="is fine."), chunk(finish_reason="stop")]
    stub.enqueue(Stream(events, done=False, ending=ending))  # type: ignore[arg-type]

    result = result_of(await frames_of(agent(stub, True)))

    assert (result.status, result.text) == (ResultStatus.COMPLETED, "The page is fine.")
    assert result.usage is not None and result.usage.unreported_requests == 1
    assert len(stub.requests) == 1


async def test_a_stream_cut_before_its_finish_reason_fails_the_turn(stub: StubModel) -> None:
    # Cut mid-answer: the turn is lost, and not asked again (it would be paid for twice).
    stub.enqueue(Stream([chunk(content="The page")], done=False, ending="cut"))

    result = result_of(await frames_of(agent(stub, True, sleep=Sleeps())))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert (result.error.code, len(stub.requests)) == ("BEM-060", 1)


# -- errors and retries ------------------------------------------------------------------


def openai_error(status: int, message: str, kind: str, **headers: str) -> Reply:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return Reply(body, status=status, headers=headers)


@pytest.mark.parametrize(
    ("status", "kind", "hint"),
    [
        (400, "invalid_request_error", "rejected the request body"),
        (401, "invalid_request_error", "check the API key"),
    ],
)
async def test_an_openai_error_body_is_quoted_and_not_retried(
    stub: StubModel, status: int, kind: str, hint: str
) -> None:
    stub.enqueue(openai_error(status, "Unsupported parameter: 'max_tokens'.", kind))

    with pytest.raises(ModelError) as caught:
        await client(stub).complete(MESSAGES, [READ_FILE])

    assert caught.value.code == "BEM-061"
    assert "Unsupported parameter: 'max_tokens'." in caught.value.message and hint in (
        caught.value.message
    )
    assert len(stub.requests) == 1


def over_window() -> Reply:
    message = "This model's maximum context length is 32768 tokens. However, you requested 40000"
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    return Reply(body, status=400)


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_request_over_the_window_is_compacted_and_sent_once_more(
    stub: StubModel, stream: bool
) -> None:
    stub.enqueue(Reply(chat_completion(tool_calls=[("call_a", "read_file", '{"path": "a"}')])))
    stub.enqueue(over_window())
    serve(stub, stream, chat_completion("The page is fine."))
    helper = ToolLoopAgent("helper", client(stub), [lookup_tool(30_000)], stream_tokens=stream)

    result = result_of(await frames_of(helper))

    assert (result.status, result.text) == (ResultStatus.COMPLETED, "The page is fine.")
    refused, retried = stub.requests[1].json["messages"], stub.requests[2].json["messages"]
    assert len(json.dumps(retried)) < len(json.dumps(refused)) // 4
    assert "compacted" in retried[-1]["content"]


async def test_a_request_refused_twice_as_over_the_window_is_bem_072(stub: StubModel) -> None:
    stub.enqueue(Reply(chat_completion(tool_calls=[("call_a", "read_file", '{"path": "a"}')])))
    stub.enqueue(over_window(), over_window())
    helper = ToolLoopAgent("helper", client(stub), [lookup_tool(30_000)])

    result = result_of(await frames_of(helper))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "BEM-072" and "model.context_window" in result.error.message
    assert len(stub.requests) == 3


@pytest.mark.parametrize(
    ("headers", "waited"),
    [
        ({"retry-after-ms": "1200"}, 1.2),
        ({"retry-after": "3"}, 3.0),
        ({"x-should-retry": "true"}, 0.5),
    ],
)
async def test_429_with_each_retry_header(
    stub: StubModel, headers: dict[str, str], waited: float
) -> None:
    sleeps = Sleeps()
    stub.enqueue(openai_error(429, "Rate limit reached", "rate_limit_exceeded", **headers))
    stub.enqueue(Reply(chat_completion("ok")))

    assert (await client(stub, sleeps).complete(MESSAGES, [])).text == "ok"
    assert sleeps.calls == [waited]


async def test_x_should_retry_false_is_not_retried(stub: StubModel) -> None:
    stub.enqueue(openai_error(429, "quota", "insufficient_quota", **{"x-should-retry": "false"}))

    with pytest.raises(ModelError, match="BEM-061"):
        await client(stub, Sleeps()).complete(MESSAGES, [])


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_5xx_is_retried(stub: StubModel, status: int) -> None:
    stub.enqueue(openai_error(status, "The server had an error", "server_error"))
    stub.enqueue(Reply(chat_completion("ok")))

    assert (await client(stub, Sleeps()).complete(MESSAGES, [])).text == "ok"
    assert len(stub.requests) == 2


@pytest.mark.parametrize("stream", STREAMED)
async def test_a_reset_before_the_reply_is_retried(stub: StubModel, stream: bool) -> None:
    stub.enqueue(Hang(seconds=0))
    serve(stub, stream, chat_completion("after the reset"))

    result = result_of(await frames_of(agent(stub, stream, sleep=Sleeps())))

    assert result.text == "after the reset" and len(stub.requests) == 2


async def test_a_reset_during_a_stream_is_not_replayed(stub: StubModel) -> None:
    stub.enqueue(Stream([chunk(content="Half an ans")], done=False, ending="cut"))

    with pytest.raises(ModelError) as caught:
        [item async for item in client(stub, Sleeps()).stream(MESSAGES, [])]

    assert caught.value.code == "BEM-060" and len(stub.requests) == 1


async def test_an_error_event_mid_stream(stub: StubModel) -> None:
    failure = {"error": {"message": "The model is overloaded", "type": "server_error"}}
    stub.enqueue(Stream([chunk(content="Hel"), f"data: {json.dumps(failure)}\n\n"], done=False))

    with pytest.raises(ModelError) as caught:
        [item async for item in client(stub).stream(MESSAGES, [])]

    assert caught.value.code == "BEM-063"
    assert "The model is overloaded" in caught.value.message


# -- the checker itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [], "chat_template_kwargs": {"thinking": False}},
        {"model": "m", "messages": [{"role": "tool", "content": "no call id"}]},
        {"model": "m", "messages": [], "max_tokens": "4096"},
        {"messages": []},
    ],
)
def test_the_checker_refuses_what_the_openai_types_do_not_allow(body: dict[str, Any]) -> None:
    with pytest.raises(conformance.NotConformant):
        check_request(body)
