"""OpenAiCompatible.stream: text deltas, tool-call deltas, event-stream quirks, and what a
stream that breaks or lies turns into."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import traceback
from typing import Any

import pytest

from bot.clients import Completion, OpenAiCompatible, TextDelta, ToolCall
from bot.core.errors import BeamError, ModelError
from bot.core.frames import Usage
from harness.stub_model import (
    DEFAULT_USAGE,
    STUB_MODEL,
    Stream,
    StubModel,
    chunk,
    completion,
    error,
    text_stream,
)
from tests.clients.helpers import KEY, MESSAGES, READ_FILE, Sleeps, collect, make_client

USAGE = Usage(**DEFAULT_USAGE)


def call_piece(index: int, arguments: str, *, call_id: str = "", name: str = "") -> dict[str, Any]:
    """One streamed tool-call delta; id and name only in the first piece of a call."""
    function: dict[str, Any] = {"arguments": arguments}
    piece: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        piece.update(id=call_id, type="function")
        function["name"] = name
    return piece


async def test_yields_each_text_delta_then_the_completion(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(text_stream("Hel", "lo", ", docs"))

    items = await collect(client.stream(MESSAGES, [READ_FILE]))

    assert items == [
        TextDelta(text="Hel"),
        TextDelta(text="lo"),
        TextDelta(text=", docs"),
        Completion(text="Hello, docs", usage=USAGE, model=STUB_MODEL, finish_reason="stop"),
    ]
    request = stub_model.requests[0]
    assert request.headers["accept"] == "text/event-stream"
    assert request.json["stream"] is True
    assert request.json["stream_options"] == {"include_usage": True}
    assert request.json["tools"] == [READ_FILE.openai_format()]


async def test_accumulates_tool_call_deltas_by_index(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(
        Stream(
            [
                chunk(tool_calls=[call_piece(0, "", call_id="call_a", name="read_file")]),
                chunk(tool_calls=[call_piece(0, '{"pa')]),
                chunk(tool_calls=[call_piece(1, "", call_id="call_b", name="git_status")]),
                chunk(tool_calls=[call_piece(0, 'th": "index.md"}')]),
                chunk(finish_reason="tool_calls"),
                chunk(usage=DEFAULT_USAGE),
            ]
        )
    )

    items = await collect(client.stream(MESSAGES, [READ_FILE]))

    assert items == [
        Completion(
            tool_calls=[
                ToolCall(id="call_a", name="read_file", arguments='{"path": "index.md"}'),
                ToolCall(id="call_b", name="git_status", arguments="{}"),
            ],
            usage=USAGE,
            model=STUB_MODEL,
            finish_reason="tool_calls",
        )
    ]


async def test_text_and_tool_calls_in_one_stream(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    piece = call_piece(0, '{"path": "a.md"}', call_id="call_1", name="read_file")
    stub_model.enqueue(
        Stream(
            [chunk("Let me look."), chunk(tool_calls=[piece]), chunk(finish_reason="tool_calls")]
        )
    )

    *deltas, final = await collect(client.stream(MESSAGES, [READ_FILE]))

    assert deltas == [TextDelta(text="Let me look.")]
    assert isinstance(final, Completion)
    assert final.text == "Let me look."
    assert final.tool_calls == [
        ToolCall(id="call_1", name="read_file", arguments='{"path": "a.md"}')
    ]
    assert final.usage is None


async def test_reads_comments_crlf_named_events_and_multi_line_data(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    first = '{"model": "m-1", "choices": [{"index": 0,\r\ndata: "delta": {"content": "Hi"}}]}'
    stub_model.enqueue(
        Stream(
            [
                ": keep-alive\r\n\r\n",
                f"event: message\r\nid: 1\r\nretry: 100\r\ndata: {first}\r\n\r\n",
                "data:" + json.dumps(chunk(" there", finish_reason="stop")) + "\r\r",
            ],
            line_end="\r\n",
        )
    )

    items = await collect(client.stream(MESSAGES, []))

    assert items == [
        TextDelta(text="Hi"),
        TextDelta(text=" there"),
        Completion(text="Hi there", model=STUB_MODEL, finish_reason="stop"),
    ]


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (Stream([chunk("ok")]), None),  # [DONE] without a finish_reason
        (Stream([chunk("ok", finish_reason="stop")], done=False), "stop"),  # no [DONE]
    ],
)
async def test_either_done_or_a_finish_reason_ends_the_answer(
    client: OpenAiCompatible, stub_model: StubModel, stream: Stream, reason: str | None
) -> None:
    stub_model.enqueue(stream)

    items = await collect(client.stream(MESSAGES, []))

    ended = Completion(text="ok", model=STUB_MODEL, finish_reason=reason)
    assert items == [TextDelta(text="ok"), ended]


async def test_a_json_reply_to_a_stream_request_is_taken_whole(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(completion("in one piece"))

    items = await collect(client.stream(MESSAGES, []))

    assert items == [
        TextDelta(text="in one piece"),
        Completion(text="in one piece", usage=USAGE, model=STUB_MODEL, finish_reason="stop"),
    ]


@pytest.mark.parametrize(
    "broken",
    [
        Stream([chunk()], done=False),  # only the role: the reply had not started
        Stream([], done=False, ending="cut"),
        Stream([], done=False, ending="hang"),
    ],
)
async def test_a_stream_that_breaks_before_the_reply_started_is_retried(
    stub_model: StubModel, sleeps: Sleeps, broken: Stream
) -> None:
    client = make_client(stub_model, sleeps, read_timeout=0.5)
    stub_model.enqueue(broken, text_stream("fine"))

    items = await collect(client.stream(MESSAGES, []))

    assert items[-1] == Completion(text="fine", usage=USAGE, model=STUB_MODEL, finish_reason="stop")
    assert (len(stub_model.requests), sleeps.calls) == (2, [0.5])


TOOL_START = chunk(tool_calls=[call_piece(0, "{", call_id="c", name="read_file")])


@pytest.mark.parametrize(
    ("started", "ending", "reason"),
    [
        (chunk("Hel"), "clean", "ended before its last chunk"),
        (chunk("Hel"), "cut", "RemoteProtocolError"),
        (chunk("Hel"), "hang", "ReadTimeout"),
        (TOOL_START, "clean", "ended before its last chunk"),
        (TOOL_START, "cut", "RemoteProtocolError"),
        (TOOL_START, "hang", "ReadTimeout"),
    ],
)
async def test_a_stream_that_breaks_after_the_reply_started_is_bem_060_without_retry(
    stub_model: StubModel, sleeps: Sleeps, started: dict[str, Any], ending: Any, reason: str
) -> None:
    client = make_client(stub_model, sleeps, read_timeout=0.5)
    stub_model.enqueue(Stream([started], done=False, ending=ending), text_stream("unused"))
    received: list[TextDelta | Completion] = []

    with pytest.raises(ModelError) as caught:
        async for item in client.stream(MESSAGES, []):
            received.append(item)

    assert received == ([TextDelta(text="Hel")] if started is not TOOL_START else [])
    assert caught.value.code == "BEM-060"
    assert "broke after the model had started its reply" in caught.value.message
    assert reason in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_a_stream_that_keeps_breaking_is_bem_060(
    stub_model: StubModel, sleeps: Sleeps
) -> None:
    client = make_client(stub_model, sleeps, max_retries=2)
    stub_model.enqueue(*[Stream([], done=False, ending="cut")] * 3)

    with pytest.raises(ModelError) as caught:
        await collect(client.stream(MESSAGES, []))

    assert caught.value.code == "BEM-060"
    assert "after 3 attempts" in caught.value.message
    assert sleeps.calls == [0.5, 1.0]


async def test_stream_status_errors_retry_or_refuse_like_complete(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    stub_model.enqueue(
        error(429, "busy", retry_after="3"), text_stream("ok"), error(401, "bad key")
    )

    items = await collect(client.stream(MESSAGES, []))
    with pytest.raises(ModelError) as caught:
        await collect(client.stream(MESSAGES, []))

    assert items[-1] == Completion(text="ok", usage=USAGE, model=STUB_MODEL, finish_reason="stop")
    assert sleeps.calls == [3.0]
    assert caught.value.code == "BEM-061"
    assert "HTTP 401: bad key" in caught.value.message
    assert len(stub_model.requests) == 3


@pytest.mark.parametrize(
    ("stream", "problem"),
    [
        (Stream(["data: {not json\n\n"]), "a stream event is not JSON: '{not json'"),
        (Stream(['{"choices": []}\n\n']), "not an event-stream line"),
        (Stream([chunk("hi")], content_type="text/html"), "content-type 'text/html'"),
        (Stream([chunk("hi")], content_type="text/plain"), "content-type 'text/plain'"),
        (
            Stream([{"error": {"message": "overloaded mid-way"}}]),
            "error mid-stream: overloaded mid-way",
        ),
        (Stream([{"id": "x"}]), "a stream chunk has no 'choices' list"),
        (Stream(["data: [1, 2]\n\n"]), "a stream chunk is a JSON list"),
        (Stream([{"choices": ["text"]}]), "choice is not an object"),
        (Stream([{"choices": [{"delta": "text"}]}]), "'delta' is not an object"),
        (Stream([{"choices": [{"delta": {"content": 42}}]}]), "delta.content is a JSON int"),
        (Stream([{"choices": [{"delta": {"tool_calls": {}}}]}]), "'tool_calls' is not a list"),
        (Stream([chunk(tool_calls=[{"index": "0"}])]), "no integer 'index'"),
        (
            Stream([chunk(tool_calls=[{"index": 0, "function": "f"}])]),
            "'function' is not an object",
        ),
        (
            Stream([chunk(tool_calls=[call_piece(0, "{}")]), chunk(finish_reason="tool_calls")]),
            "tool call 0 has no function name",
        ),
    ],
)
async def test_malformed_streams_are_bem_063_without_retry(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps, stream: Stream, problem: str
) -> None:
    stub_model.enqueue(stream)

    with pytest.raises(ModelError) as caught:
        await collect(client.stream(MESSAGES, []))

    assert caught.value.code == "BEM-063"
    assert problem in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_a_malformed_stream_after_text_is_still_bem_063(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(Stream([chunk("fine so far"), "data: {oops\n\n"]))
    received: list[TextDelta | Completion] = []

    with pytest.raises(ModelError) as caught:
        async for item in client.stream(MESSAGES, []):
            received.append(item)

    assert received == [TextDelta(text="fine so far")]
    assert caught.value.code == "BEM-063"


@pytest.mark.parametrize(
    "stream",
    [
        Stream([f"data: {KEY} is not valid\n\n"]),
        Stream([{"error": {"message": f"quota exceeded for {KEY}"}}]),
        Stream([f"Authorization: Bearer {KEY}\n\n"]),
    ],
)
async def test_stream_errors_do_not_quote_the_key(
    client: OpenAiCompatible,
    stub_model: StubModel,
    caplog: pytest.LogCaptureFixture,
    stream: Stream,
) -> None:
    caplog.set_level(logging.DEBUG)
    stub_model.enqueue(stream)

    with pytest.raises(BeamError) as caught:
        await collect(client.stream(MESSAGES, []))

    assert "[redacted]" in caught.value.message
    assert KEY not in "".join(traceback.format_exception(caught.value)) + caplog.text


async def test_a_consumer_that_stops_early_does_not_wait_for_the_server(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(Stream([chunk("first")], done=False, ending="hang"))
    started = time.monotonic()

    async with contextlib.aclosing(client.stream(MESSAGES, [])) as items:
        async for item in items:
            assert item == TextDelta(text="first")
            break

    assert time.monotonic() - started < 2.0
