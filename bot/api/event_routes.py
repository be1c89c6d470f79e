"""``GET /v1/jobs/{id}/events``: a job's event stream as server-sent events.

Each stored frame is one ``frame`` event whose ``id`` is its stream entry id; the stream
ends with one ``end`` event carrying the final state, then closes. A client that reconnects
with ``Last-Event-ID`` (or ``?after=``) gets what came after that entry, nothing twice.

Redis is read with blocking ``XREAD``s on the store's synchronous client, so each read runs
in a worker thread, one short slice (at most a second) at a time, and the stream stops
between slices once the client is gone (Starlette cancels it on disconnect; a write to a
closed connection also ends it). Stream reads take their threads from their own limiter,
``MAX_CONCURRENT_READS`` at once: many followers can never take the threads the other
endpoints run on, and each read holds one Redis connection only for its slice. Followers
beyond the limit wait their turn for a slice; events are delivered later, never lost.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated, TypeVar

import anyio
from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from fastapi.sse import format_sse_event

from bot.api.job_routes import JobId
from bot.core.errors import BeamError
from bot.core.frames import frame_adapter
from bot.http.deps import PrincipalDep, ServiceDep
from bot.http.problems import problem_responses
from bot.service.access import Principal
from bot.service.operations import Service
from bot.store.models import JobEvent, JobState
from bot.store.store import JobStore

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
T = TypeVar("T")

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


def checked_event_id(value: str) -> str:
    """A stream entry id (``<ms>`` or ``<ms>-<seq>``, each below 2**64) or BEM-705: Redis
    rejects larger numbers, so a bad id is refused before the stream starts."""
    match = _EVENT_ID.fullmatch(value)
    if match is None or any(int(part) > _ID_MAX for part in match.groups("0")):
        raise BeamError("BEM-705", f"{value[:40]!r} is not an event id (like 1700000000000-0)")
    return value


@router.get(
    "/{job_id}/events",
    response_class=EventStreamResponse,
    summary="Follow a job's events (server-sent events)",
    responses={
        200: {
            "description": EVENT_STREAM_DOC,
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 403, 404, 422, 503),
    },
)
async def follow(
    job_id: JobId,
    service: ServiceDep,
    who: PrincipalDep,
    after: Annotated[
        str, Query(max_length=41, description="the last event id already seen; 0: from the start")
    ] = "0",
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=41, description="overrides ?after="),
    ] = None,
) -> EventStreamResponse:
    resume = last_event_id if last_event_id is not None else after
    return await open_event_stream(service, who, job_id, after=resume)


async def open_event_stream(
    service: Service, who: Principal, job_id: str, *, after: str
) -> EventStreamResponse:
    """The answer that streams job ``job_id``'s events after entry ``after`` to ``who``
    (the web pages' live feed uses it too). A bad id, an unknown job or one outside the
    caller's scope raises before the answer starts, so it is still a problem document."""
    start = checked_event_id(after)
    await anyio.to_thread.run_sync(partial(service.job, who, job_id))
    keepalive = service.settings.api.sse_keepalive_seconds
    stream = _stream(service.store, job_id, after=start, keepalive=keepalive)
    # No caching, and no buffering by a proxy in front (nginx honours X-Accel-Buffering).
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(stream, headers=headers)


async def _stream(
    store: JobStore, job_id: str, *, after: str, keepalive: float
) -> AsyncIterator[bytes]:
    """What the job's stream holds after ``after``, then what comes, until its end event."""
    slice_ms = max(1, int(min(SLICE_SECONDS, keepalive) * 1000))
    block: int | None = None  # the first read answers at once with what is stored
    checked_end = False
    quiet_since = time.monotonic()
    try:
        while True:
            events = await _in_thread(
                partial(store.read_events, job_id, after=after, block_ms=block)
            )
            block = slice_ms
            for event in events:
                yield _encode(event)
                after = event.id
                if event.end is not None:
                    return
            if events:
                quiet_since = time.monotonic()
                continue
            idle = time.monotonic() - quiet_since >= keepalive
            if idle or not checked_end:
                # A job that ended with no end marker after ``after`` (the client resumed
                # past it, or the stream was trimmed) must not leave its follower waiting.
                checked_end = True
                record = await _in_thread(partial(store.get, job_id))
                if record.state.is_final:
                    yield _end_event(record.state, None)
                    return
            if idle:
                yield format_sse_event(comment="keep-alive")
                quiet_since = time.monotonic()
    except BeamError as error:
        yield _error_event(error)


async def _in_thread(call: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(call, limiter=_reads)


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
