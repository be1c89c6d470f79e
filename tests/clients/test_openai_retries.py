"""Retries, which the SDK makes: which failures are retried, how long the client waits, and
what it raises when the attempts run out. Delays are read from an injected sleep, except in
one real-time test; the SDK's jitter is pinned (``no_jitter``) unless a test sets it."""

from __future__ import annotations

import logging
import random
import socket
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from bot.clients import OpenAiCompatible
from bot.clients.retry import parse_retry_after
from bot.core.errors import ModelError
from harness.stub_model import Hang, Reply, StubModel, completion, error, text_stream
from tests.clients.helpers import KEY, MESSAGES, Sleeps, make_client


async def test_429_then_success_waits_as_retry_after_says(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    stub_model.enqueue(error(429, "slow down", retry_after="2"), completion("ok"))

    result = await client.complete(MESSAGES, [])

    assert result.text == "ok"
    assert sleeps.calls == [2.0]
    assert len(stub_model.requests) == 2
    assert stub_model.requests[0].json == stub_model.requests[1].json


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_each_retry_is_logged_with_the_status_the_provider_message_and_the_wait(
    client: OpenAiCompatible,
    stub_model: StubModel,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    answer = text_stream("ok") if stream else completion("ok")
    stub_model.enqueue(error(429, "slow down", retry_after="2"), Hang(seconds=0), answer)

    with caplog.at_level(logging.WARNING, logger="bot.clients.openai_compatible"):
        if stream:
            assert [item async for item in client.stream(MESSAGES, [])]
        else:
            await client.complete(MESSAGES, [])

    assert [record.getMessage() for record in caplog.records] == [
        f"model request to {client.endpoint} failed: status 429 (slow down); retry 1 of 4"
        " in 2.00 s",
        f"model request to {client.endpoint} failed: no response (the connection failed or"
        " timed out); retry 2 of 4 in 1.00 s",
    ]


async def test_retry_after_as_an_http_date(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    stub_model.enqueue(error(503, "maintenance", retry_after=when), completion("ok"))

    await client.complete(MESSAGES, [])

    [delay] = sleeps.calls
    assert 27.0 < delay <= 30.0


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        ("120", 120.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.5),
        ("0", 0.5),
        ("soon", 0.5),
        ("nan", 0.5),
    ],
)
async def test_retry_after_up_to_two_minutes_is_waited_and_any_other_falls_back_to_backoff(
    stub_model: StubModel, sleeps: Sleeps, retry_after: str, expected: float
) -> None:
    client = make_client(stub_model, sleeps)
    stub_model.enqueue(error(429, "busy", retry_after=retry_after), completion("ok"))

    await client.complete(MESSAGES, [])

    assert sleeps.calls == [expected]


async def test_a_retry_after_over_two_minutes_is_not_waited_for(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    # The SDK's rule: a server that asks for more than two minutes is not retried, so a
    # worker is never parked for an hour.
    stub_model.enqueue(error(429, "busy", retry_after="3600"), completion("unused"))

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-062"
    assert "last status 429 after 1 attempts (busy)" in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_retry_after_really_waits(stub_model: StubModel) -> None:
    client = OpenAiCompatible(stub_model.base_url, KEY, "m", read_timeout=5.0)
    stub_model.enqueue(error(429, "busy", retry_after="1"), completion("ok"))

    started = time.monotonic()
    result = await client.complete(MESSAGES, [])
    elapsed = time.monotonic() - started

    assert result.text == "ok"
    assert elapsed >= 1.0


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 520, 529])
async def test_retryable_statuses_then_success(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps, status: int
) -> None:
    stub_model.enqueue(error(status, "try again"), completion("ok"))

    assert (await client.complete(MESSAGES, [])).text == "ok"
    assert sleeps.calls == [0.5]
    assert len(stub_model.requests) == 2


async def test_exhausted_retries_are_bem_062_with_the_last_status(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    stub_model.enqueue(*[error(502, "bad gateway")] * 4, error(503, "overloaded"))

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-062"
    assert "kept failing: last status 503 after 5 attempts (overloaded)" in caught.value.message
    assert sleeps.calls == [0.5, 1.0, 2.0, 4.0]
    assert len(stub_model.requests) == 5


async def test_the_default_is_two_retries_capped_at_eight_seconds(
    stub_model: StubModel, sleeps: Sleeps
) -> None:
    client = OpenAiCompatible(stub_model.base_url, KEY, "m", sleep=sleeps)
    stub_model.enqueue(*[error(500, "down")] * 3)

    with pytest.raises(ModelError, match="after 3 attempts"):
        await client.complete(MESSAGES, [])

    assert sleeps.calls == [0.5, 1.0]
    longer = make_client(stub_model, sleeps, max_retries=6)
    sleeps.calls.clear()
    stub_model.enqueue(*[error(500, "down")] * 7)
    with pytest.raises(ModelError):
        await longer.complete(MESSAGES, [])
    assert sleeps.calls == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "1500", "Retry-After": "30"}, 1.5),
        ({"retry-after-ms": "soon", "Retry-After": "4"}, 4.0),
        ({"Retry-After": "2"}, 2.0),
    ],
)
async def test_retry_after_ms_comes_before_retry_after(
    stub_model: StubModel, sleeps: Sleeps, headers: dict[str, str], expected: float
) -> None:
    busy = error(429, "busy")
    stub_model.enqueue(Reply(busy.body, status=429, headers=headers), completion("ok"))

    await make_client(stub_model, sleeps).complete(MESSAGES, [])

    assert sleeps.calls == [expected]


@pytest.mark.parametrize(("status", "hint"), [(400, "true"), (409, "true"), (418, "true")])
async def test_x_should_retry_true_retries_any_status(
    stub_model: StubModel, sleeps: Sleeps, status: int, hint: str
) -> None:
    said = error(status, "again")
    stub_model.enqueue(
        Reply(said.body, status=status, headers={"x-should-retry": hint}), completion("ok")
    )

    assert (await make_client(stub_model, sleeps).complete(MESSAGES, [])).text == "ok"
    assert len(stub_model.requests) == 2


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_x_should_retry_false_stops_at_once(
    stub_model: StubModel, sleeps: Sleeps, status: int
) -> None:
    said = error(status, "do not")
    stub_model.enqueue(Reply(said.body, status=status, headers={"x-should-retry": "false"}))

    with pytest.raises(ModelError) as caught:
        await make_client(stub_model, sleeps).complete(MESSAGES, [])

    assert caught.value.code == "BEM-061"
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_jitter_takes_up_to_a_quarter_off_each_step(
    stub_model: StubModel, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("openai._base_client.random", lambda: 1.0)
    client = make_client(stub_model, sleeps, max_retries=3)
    stub_model.enqueue(*[error(500, "down")] * 4)

    with pytest.raises(ModelError):
        await client.complete(MESSAGES, [])

    assert sleeps.calls == [0.375, 0.75, 1.5]


async def test_random_jitter_stays_between_zero_and_the_step(
    stub_model: StubModel, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("openai._base_client.random", random.Random(20).random)
    client = make_client(stub_model, sleeps)
    stub_model.enqueue(*[error(500, "down")] * 5)

    with pytest.raises(ModelError):
        await client.complete(MESSAGES, [])

    steps = [0.5, 1.0, 2.0, 4.0]
    pairs = zip(sleeps.calls, steps, strict=True)
    assert all(0.75 * step <= delay <= step for delay, step in pairs)
    assert len(set(sleeps.calls)) == 4


async def test_no_retries_means_one_attempt(stub_model: StubModel, sleeps: Sleeps) -> None:
    client = make_client(stub_model, sleeps, max_retries=0)
    stub_model.enqueue(error(503, "down"))

    with pytest.raises(ModelError, match="after 1 attempts"):
        await client.complete(MESSAGES, [])

    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_a_reply_slower_than_the_read_timeout_is_not_requested_again(
    stub_model: StubModel, sleeps: Sleeps
) -> None:
    client = make_client(stub_model, sleeps, read_timeout=0.5, max_retries=3)
    stub_model.enqueue(Hang(), completion("unused"))

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-069"
    assert "model.read_timeout" in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_connect_and_read_have_their_own_timeouts() -> None:
    seen: list[dict[str, float]] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=completion("ok").body)

    transport = httpx.MockTransport(answer)
    default = OpenAiCompatible("http://127.0.0.1:9/v1", KEY, "m", transport=transport)
    tuned = OpenAiCompatible(
        "http://127.0.0.1:9/v1", KEY, "m", transport=transport, connect_timeout=1.5, read_timeout=90
    )

    await default.complete(MESSAGES, [])
    await tuned.complete(MESSAGES, [])

    assert [(timeouts["connect"], timeouts["read"]) for timeouts in seen] == [
        (5.0, 600.0),
        (1.5, 90.0),
    ]


async def test_a_dropped_connection_is_retried(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps
) -> None:
    stub_model.enqueue(Hang(seconds=0), completion("ok"))

    assert (await client.complete(MESSAGES, [])).text == "ok"
    assert len(stub_model.requests) == 2


async def test_connection_refused_is_retried_then_bem_060(sleeps: Sleeps) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAiCompatible(f"http://127.0.0.1:{port}/v1", KEY, "m", sleep=sleeps, max_retries=2)

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-060"
    assert "ConnectError" in caught.value.message
    assert sleeps.calls == [0.5, 1.0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("3", 3.0),
        (" 1.5 ", 1.5),
        ("-4", 0.0),
        ("inf", None),
        ("tomorrow", None),
        ("Thu, 01 Jan 1970 00:00:10 GMT", 7.0),
        ("Thu, 01 Jan 1970 00:00:01 GMT", 0.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=3.0) == expected
