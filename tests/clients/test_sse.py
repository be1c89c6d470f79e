"""The event-stream decoder on its own, fed bytes the way the network delivers them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.clients.sse import SseDecoder, SseError, SseEvent, aiter_events


def decode(*chunks: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


@pytest.mark.parametrize(
    "chunks",
    [
        (b"data: a\n\ndata: b\n\n",),
        (b"data: a\r\n\r\ndata: b\r\n\r\n",),
        (b"data: a\r\rdata: b\r\r",),
        (b"data: a\r", b"\n\r", b"\ndata: b\r\n", b"\r\n"),
        (b"da", b"ta", b": a\n", b"\n", b"data: b\n\n"),
    ],
)
def test_line_ends_and_split_reads(chunks: tuple[bytes, ...]) -> None:
    assert decode(*chunks) == [SseEvent("a"), SseEvent("b")]


def test_a_crlf_split_across_reads_is_one_line_end() -> None:
    decoder = SseDecoder()

    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r\n") == [SseEvent("a")]


def test_multi_line_data_joins_with_newlines() -> None:
    assert decode(b"data: one\ndata:two\ndata:  three\ndata\n\n") == [
        SseEvent("one\ntwo\n three\n")
    ]


def test_comments_ids_retry_and_event_names() -> None:
    body = b": hello\nid: 7\nretry: 10\nevent: ping\ndata: x\n\ndata: y\n\n"

    # The last id set carries over to later events: it is what a reconnecting reader sends.
    assert decode(body) == [SseEvent("x", "ping", "7"), SseEvent("y", id="7")]


def test_an_id_holding_nul_is_ignored_and_an_empty_one_resets() -> None:
    body = b"id: 3\ndata: a\n\nid: 4\0\ndata: b\n\nid\ndata: c\n\n"

    assert [event.id for event in decode(body)] == ["3", "3", ""]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\n: only a comment\n\n") == []


def test_a_leading_byte_order_mark_is_dropped() -> None:
    assert decode(b"\xef\xbb", b"\xbfdata: x\n\n") == [SseEvent("x")]


def test_multibyte_characters_split_across_reads() -> None:
    body = "data: é ✓ 文\n\n".encode()

    assert decode(*(body[i : i + 1] for i in range(len(body)))) == [SseEvent("é ✓ 文")]


@pytest.mark.parametrize("tail", [b"data: cut", b"data: cut\n", b"data: cut\r\n"])
def test_an_unfinished_event_at_the_end_is_dropped(tail: bytes) -> None:
    assert decode(b"data: whole\n\n", tail) == [SseEvent("whole")]


@pytest.mark.parametrize("line", [b'{"choices": []}\n', b"Data: x\n", b"HTTP/1.1 200 OK\n"])
def test_a_line_that_is_not_an_event_field_is_an_error(line: bytes) -> None:
    with pytest.raises(SseError) as caught:
        decode(line)

    assert caught.value.reason == "not an event-stream line"
    assert caught.value.line == line.decode().rstrip("\n")


def test_an_event_over_the_size_cap_is_an_error() -> None:
    decoder = SseDecoder(max_event_chars=64)
    decoder.feed(b"data: " + b"x" * 40 + b"\n")

    with pytest.raises(SseError, match="longer than 64"):
        decoder.feed(b"data: " + b"y" * 40)


def test_a_line_that_never_ends_is_stopped_at_the_cap() -> None:
    decoder = SseDecoder(max_event_chars=1000)

    with pytest.raises(SseError):
        for _ in range(100):
            decoder.feed(b"z" * 100)


async def test_aiter_events_reads_an_async_body() -> None:
    async def body() -> AsyncIterator[bytes]:
        for piece in (b"data: 1\n", b"\ndata: 2", b"\n\n"):
            yield piece

    assert [event async for event in aiter_events(body())] == [SseEvent("1"), SseEvent("2")]
