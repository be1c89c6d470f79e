"""``/v1/jobs``: submit a job, list and read jobs, cancel one. The event stream of a job is
in ``bot.api.event_routes`` (framed by ``bot.http.event_stream``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response

from bot.core.errors import BeamError
from bot.http.deps import PrincipalDep, ServiceDep
from bot.http.problems import problem_responses
from bot.service.schemas import JobPage, JobRequest, JobView
from bot.store.listing import MAX_CURSOR_CHARS
from bot.store.models import JobKind, JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_PAGE = 100

JobId = Annotated[str, Path(min_length=1, max_length=100, description="the job's id")]


@router.post(
    "",
    status_code=201,
    response_model=JobView,
    summary="Submit a job",
    responses={
        201: {
            "headers": {"Location": {"description": "the job's URL", "schema": {"type": "string"}}}
        },
        **problem_responses(401, 403, 422, 503),
    },
)
def submit(
    body: JobRequest,
    response: Response,
    service: ServiceDep,
    who: PrincipalDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            max_length=200,
            description="repeat the key on a retry: the same body returns the same job, "
            "a different body is BEM-501",
        ),
    ] = None,
) -> JobView:
    """Queue a job for the token's holder. ``metadata.confirm`` is dropped: only the
    approval endpoints release a parked push."""
    record = service.submit(who, body, idempotency_key=idempotency_key)
    response.headers["Location"] = f"{router.prefix}/{record.id}"
    return JobView.of(record)


@router.get(
    "",
    response_model=JobPage,
    summary="List jobs, newest first",
    responses=problem_responses(401, 403, 422, 503),
)
def list_jobs(
    service: ServiceDep,
    who: PrincipalDep,
    state: JobState | None = None,
    kind: JobKind | None = None,
    repo: Annotated[str | None, Query(max_length=100)] = None,
    requested_by: Annotated[str | None, Query(max_length=200)] = None,
    mine: Annotated[bool, Query(description="only the token holder's own jobs")] = False,
    cursor: Annotated[
        str | None,
        Query(max_length=MAX_CURSOR_CHARS, description="next_cursor of the previous page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> JobPage:
    """The jobs of the repositories the token may use, filtered; ``next_cursor`` is null on
    the last page. A stored record that cannot be read is left out; a token limited to no
    repository sees its id under ``unreadable``."""
    if mine:
        if requested_by not in (None, who.name):
            raise BeamError("BEM-705", "mine=true and requested_by name different people")
        requested_by = who.name
    found = service.jobs(
        who,
        state=state,
        kind=kind,
        repo=repo,
        requested_by=requested_by,
        cursor=cursor,
        limit=limit,
    )
    return JobPage(
        items=[JobView.of(record) for record in found.records],
        next_cursor=found.next_cursor,
        unreadable=found.unreadable,
    )


@router.get(
    "/{job_id}",
    response_model=JobView,
    summary="Read a job",
    responses=problem_responses(401, 403, 404, 422, 503),
)
def read_job(job_id: JobId, service: ServiceDep, who: PrincipalDep) -> JobView:
    """With the job's current approval in brief: what a decision on it names."""
    record = service.job(who, job_id)
    return JobView.of(record, service.store.approvals.get(record.id))


@router.post(
    "/{job_id}/cancel",
    response_model=JobView,
    summary="Cancel a job",
    responses=problem_responses(401, 403, 404, 409, 422, 503),
)
def cancel(job_id: JobId, service: ServiceDep, who: PrincipalDep) -> JobView:
    """A queued or parked job is cancelled at once; a running one gets
    ``cancel_requested`` and its worker stops it between tool calls; a finished one comes
    back unchanged. Its requester or an admin may cancel it. While the job pushes upstream
    the cancel is refused (BEM-512): wait for the push, whose outcome ``pushes`` records."""
    record = service.cancel(who, job_id)
    return JobView.of(record, service.store.approvals.get(record.id))
