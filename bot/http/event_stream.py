"""A job's event stream as server-sent events, for the API (``GET /v1/jobs/{id}/events``)
and the web pages' live feed alike.

Each stored frame is one ``frame`` event whose ``id`` is its stream entry id; the stream
ends with one ``end`` event carrying the final state, then closes. A client that reconnects
with ``Last-Event-ID`` (or ``?after=``) gets what came after that entry, nothing twice.

The job service's follow (``bot.service.follow``) reads Redis with blocking ``XREAD``s on
the store's synchronous client, so each of its steps runs in a worker thread, one short
slice (at most a second) at a time, and the stream stops between slices once the client is
gone (Starlette cancels it on disconnect; a write to a closed connection also ends it).
Stream reads take their threads from their own limiter, ``MAX_CONCURRENT_READS`` at once:
many followers can never take the threads the other endpoints run on, and each read holds
one Redis connection only for its slice. Followers beyond the limit wait their turn for a
slice; events are delivered later, never lost.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from functools import partial

import anyio
from fastapi.responses import StreamingResponse
from fastapi.sse import format_sse_event

from bot.core.errors import BeamError
from bot.core.frames import frame_adapter
from bot.service.access import Principal
from bot.service.follow import FollowItem, StreamEnd
from bot.service.jobs import JobService
from bot.store.models import JobEvent, JobState

# Threads (and so Redis connections) the event streams of one API process may hold at once.
MAX_CONCURRENT_READS = 64
# The longest one blocking read lasts: how late a disconnect or a keep-alive can be noticed.
SLICE_SECONDS = 1.0
# ASCII digits only: ``\d`` also matches other scripts' digits, which Redis refuses.
_EVENT_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")
_ID_MAX = 2**64 - 1
_reads = anyio.CapacityLimiter(MAX_CONCURRENT_READS)


class EventStreamResponse(StreamingResponse):
    # FastAPI's own EventSourceResponse drives generator endpoints with a fixed keep-alive;
    # this one only names the media type, for the answer and the OpenAPI document.
    media_type = "text/event-stream"


EVENT_STREAM_DOC = """\
`frame` events (data: the frame as JSON, id: its stream entry id), then one `end` event
(data: `{"state": "<final state>"}`); `: keep-alive` comment lines while nothing happens.
When the store fails mid-stream, an `error` event (data: `{"code", "message"}`) ends it."""


def header_text(value: str) -> str:
    """A header's value as its sender wrote it: ASGI hands header bytes over decoded as
    latin-1, so UTF-8 text (a full-width digit) would be quoted back as mojibake."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def checked_event_id(value: str) -> str:
    """A stream entry id (``<ms>`` or ``<ms>-<seq>``, each below 2**64) or BEM-705: Redis
    rejects larger numbers, so a bad id is refused before the stream starts."""
    match = _EVENT_ID.fullmatch(value)
    if match is None or any(int(part) > _ID_MAX for part in match.groups("0")):
        raise BeamError("BEM-705", f"{value[:40]!r} is not an event id (like 1700000000000-0)")
    return value


async def open_event_stream(
    service: JobService, who: Principal, job_id: str, *, after: str
) -> EventStreamResponse:
    """The answer that streams job ``job_id``'s events after entry ``after`` to ``who``. A
    bad id, an unknown job or one outside the caller's scope raises before the answer
    starts, so it is still a problem document."""
    start = checked_event_id(after)
    keepalive = service.settings.api.sse_keepalive_seconds
    slice_ms = max(1, int(min(SLICE_SECONDS, keepalive) * 1000))
    follow = partial(
        service.follow, who, job_id, after=start, wait_ms=slice_ms, look_every=keepalive
    )
    items = await anyio.to_thread.run_sync(follow)
    # No caching, and no buffering by a proxy in front (nginx honours X-Accel-Buffering).
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(_stream(items, keepalive=keepalive), headers=headers)


async def _stream(items: Iterator[FollowItem], *, keepalive: float) -> AsyncIterator[bytes]:
    """Each step of the follow, as SSE bytes; a keep-alive comment per ``keepalive`` seconds
    of quiet."""
    quiet_since = time.monotonic()
    try:
        while (
            item := await anyio.to_thread.run_sync(next, items, None, limiter=_reads)
        ) is not None:
            if isinstance(item, JobEvent):
                yield _encode(item)
                quiet_since = time.monotonic()
            elif isinstance(item, StreamEnd):
                yield _end_event(item.record.state, None)
            elif time.monotonic() - quiet_since >= keepalive:
                yield format_sse_event(comment="keep-alive")
                quiet_since = time.monotonic()
    except BeamError as error:
        yield _error_event(error)


def _encode(event: JobEvent) -> bytes:
    if event.end is not None:
        return _end_event(event.end, event.id)
    assert event.frame is not None  # a stream entry is a frame or the end marker
    data = frame_adapter.dump_json(event.frame).decode()
    return format_sse_event(event="frame", id=event.id, data_str=data)


def _end_event(state: JobState, event_id: str | None) -> bytes:
    return format_sse_event(event="end", id=event_id, data_str=json.dumps({"state": state.value}))


def _error_event(error: BeamError) -> bytes:
    data = json.dumps({"code": error.code, "message": error.message})
    return format_sse_event(event="error", data_str=data)
