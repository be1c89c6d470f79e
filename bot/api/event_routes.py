"""``GET /v1/jobs/{id}/events``: a job's event stream as server-sent events (the framing,
the threads and the keep-alives: ``bot.http.event_stream``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query

from bot.api.job_routes import JobId
from bot.http.deps import PrincipalDep, ServiceDep
from bot.http.event_stream import (
    EVENT_STREAM_DOC,
    EventStreamResponse,
    header_text,
    open_event_stream,
)
from bot.http.problems import problem_responses

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


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
    resume = header_text(last_event_id) if last_event_id is not None else after
    return await open_event_stream(service, who, job_id, after=resume)
