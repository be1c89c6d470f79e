"""The reviewers' pages: sign in and out, the approval queue with its decision forms, the jobs
list with filters, and the job page whose log follows the job live.

Every page calls the same operations as the API (``bot.service.jobs.JobService``), so roles,
repository scopes and the self-approval rule hold here exactly as they do there. Handlers
are plain functions: the store speaks blocking Redis, and FastAPI runs them in its threads.
"""

from __future__ import annotations

import builtins
from enum import StrEnum
from typing import Annotated, TypeVar

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import ValidationError

from bot.core.errors import BeamError
from bot.http.deps import ServiceDep, authenticated
from bot.http.event_stream import checked_event_id, header_text, open_event_stream
from bot.service.access import Principal, token_digest
from bot.service.jobs import JobService
from bot.service.schemas import Decision
from bot.store.listing import MAX_CURSOR_CHARS
from bot.store.models import Approval, JobKind, JobState
from bot.web.outcome import describe
from bot.web.present import diff_lines, frame_lines, previews
from bot.web.rendering import WebRoute, page, safe_next
from bot.web.sessions import SESSION_COOKIE, SIGN_IN_COOKIE, SIGN_IN_SECONDS, new_secret
from bot.web.visitors import FormVisitorDep, SessionsDep, Visitor, VisitorDep, same_secret

PAGE_SIZE = 25
PageSize = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str, Query(max_length=MAX_CURSOR_CHARS)]
E = TypeVar("E", bound=StrEnum)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


def visible_repos(service: JobService, who: Principal) -> builtins.list[str]:
    """The registered repositories the visitor's token may use."""
    return sorted(name for name in service.settings.repositories if who.sees(name))


def see_other(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def _secure(request: Request) -> bool:
    """Whether cookies say Secure: set ``api.secure_cookies`` when served over HTTPS."""
    secure: bool = request.app.state.service.settings.api.secure_cookies
    return secure


# A browser drops Secure cookies set over plain HTTP, so signing in cannot work there.
INSECURE_TRANSPORT = (
    "This page was reached over plain HTTP while api.secure_cookies is on, so your browser "
    "will not keep the sign-in cookie. Open it over HTTPS (through the TLS proxy), or turn "
    "api.secure_cookies off for a service reached on loopback only."
)


def _cookies_dropped(request: Request) -> bool:
    return _secure(request) and request.url.scheme != "https"


# -- signing in and out ----------------------------------------------------------------------


@router.get("/")
def home(visitor: VisitorDep) -> Response:
    return see_other("/approvals" if visitor.who.may_decide else "/mine")


@router.get("/sign-in")
def sign_in_form(request: Request, next: str = "/") -> Response:
    return _sign_in_page(request, safe_next(next), error=None)


def _sign_in_page(request: Request, next_path: str, *, error: str | None) -> Response:
    secret = new_secret()
    context = {
        "visitor": None,
        "csrf": secret,
        "next": next_path,
        "error": error,
        "transport_warning": INSECURE_TRANSPORT if _cookies_dropped(request) else None,
    }
    response = page(request, "sign_in.html", context, status_code=200 if error is None else 401)
    response.set_cookie(
        SIGN_IN_COOKIE,
        secret,
        max_age=SIGN_IN_SECONDS,
        samesite="strict",
        path="/sign-in",
        httponly=True,
        secure=_secure(request),
    )
    return response


@router.post("/sign-in")
def sign_in(
    request: Request,
    service: ServiceDep,
    sessions: SessionsDep,
    token: Annotated[str, Form()] = "",
    csrf: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected and _cookies_dropped(request):
        raise BeamError("BEM-704", INSECURE_TRANSPORT)
    if not expected or not same_secret(csrf, expected):
        raise BeamError("BEM-704", "the sign-in form is out of date; open it again")
    token = token.strip()
    try:
        authenticated(request, service, token)
    except BeamError:
        return _sign_in_page(request, safe_next(next), error="That token is not recognised.")
    # A fresh session id at every sign-in: an id planted before it is worth nothing.
    old = request.cookies.get(SESSION_COOKIE)
    if old:
        sessions.delete(old)
    session = sessions.create(token_digest(token))
    response = see_other(safe_next(next))
    response.set_cookie(
        SESSION_COOKIE,
        session.id,
        max_age=sessions.lifetime_seconds,
        samesite="lax",
        httponly=True,
        secure=_secure(request),
    )
    response.delete_cookie(SIGN_IN_COOKIE, path="/sign-in")
    return response


@router.post("/sign-out")
def sign_out(request: Request, visitor: FormVisitorDep, sessions: SessionsDep) -> Response:
    sessions.delete(visitor.session.id)
    response = see_other("/sign-in")
    response.delete_cookie(SESSION_COOKIE, httponly=True, secure=_secure(request))
    return response


# -- approvals ----------------------------------------------------------------------------


@router.get("/approvals")
def approval_queue(request: Request, visitor: VisitorDep, service: ServiceDep) -> Response:
    items = [_approval_item(service, visitor, a) for a in service.approvals(visitor.who)]
    return page(request, "approvals.html", {"visitor": visitor, "items": items})


def _approval_item(service: JobService, visitor: Visitor, approval: Approval) -> dict[str, object]:
    return {
        "approval": approval,
        "diff": diff_lines(approval.diff),
        # The decision form, or why not, shown instead; the post is decided again.
        "decide": service.may_decide(visitor.who, approval),
    }


@router.post("/approvals/{job_id}")
def decide(
    job_id: str,
    visitor: FormVisitorDep,
    service: ServiceDep,
    decision: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
    approval_id: Annotated[str, Form()] = "",
    commit_sha: Annotated[str, Form()] = "",
    diff_digest: Annotated[str, Form()] = "",
    override_checks: Annotated[str, Form()] = "",
) -> Response:
    """The form names the approval it was rendered with (hidden fields): a form left open
    while the job parked again on another change is refused (BEM-604), not applied to it."""
    if decision not in ("approve", "refuse"):
        raise BeamError("BEM-705", "choose Approve or Refuse")
    try:
        checked = Decision(
            comment=comment,
            approval_id=approval_id or None,
            commit_sha=commit_sha if approval_id else None,
            diff_digest=diff_digest if approval_id else None,
        )
    except ValidationError as error:
        too_long = error.errors()[0]["loc"] == ("comment",)
        why = "the comment is over 4000 characters" if too_long else "the form is damaged"
        raise BeamError("BEM-705", f"{why}; open the page again") from None
    service.decide(
        visitor.who,
        job_id,
        approve=decision == "approve",
        comment=checked.comment,
        binding=checked.binding(),
        override_checks=override_checks == "yes",
    )
    return see_other(f"/jobs/{job_id}")


# -- jobs ---------------------------------------------------------------------------------


def _choice(kind: type[E], value: str) -> E | None:
    """A filter from a query string: empty means any; anything else must be a known value."""
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(item.value for item in kind)
        raise BeamError("BEM-705", f"{value!r} is not one of: {allowed}") from None


@router.get("/jobs")
def jobs(
    request: Request,
    visitor: VisitorDep,
    service: ServiceDep,
    state: str = "",
    kind: str = "",
    repo: str = "",
    cursor: Cursor = "",
    limit: PageSize = PAGE_SIZE,
) -> Response:
    filters = {"state": state, "kind": kind, "repo": repo}
    return _job_list(request, visitor, service, filters, cursor=cursor, limit=limit, mine=False)


@router.get("/mine")
def my_requests(
    request: Request,
    visitor: VisitorDep,
    service: ServiceDep,
    state: str = "",
    repo: str = "",
    cursor: Cursor = "",
    limit: PageSize = PAGE_SIZE,
) -> Response:
    filters = {"state": state, "kind": "", "repo": repo}
    return _job_list(request, visitor, service, filters, cursor=cursor, limit=limit, mine=True)


def _job_list(
    request: Request,
    visitor: Visitor,
    service: JobService,
    filters: dict[str, str],
    *,
    cursor: str,
    limit: int,
    mine: bool,
) -> Response:
    """The jobs list, newest first, ``limit`` a page; "My requests" is the same list limited
    to what the visitor asked for."""
    found = service.jobs(
        visitor.who,
        state=_choice(JobState, filters["state"]),
        kind=_choice(JobKind, filters["kind"]),
        repo=filters["repo"] or None,
        requested_by=visitor.who.name if mine else None,
        cursor=cursor or None,
        limit=limit,
    )
    shown = {key: value for key, value in filters.items() if value}
    if limit != PAGE_SIZE:
        shown["limit"] = str(limit)
    context = {
        "visitor": visitor,
        "mine": mine,
        "records": found.records,
        "filters": filters,
        "next_query": {**shown, "cursor": found.next_cursor},
        "has_next": found.next_cursor is not None,
        "unreadable": found.unreadable,
        "repos": visible_repos(service, visitor.who),
        "states": list(JobState),
        "kinds": list(JobKind),
    }
    return page(request, "jobs.html", context)


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, visitor: VisitorDep, service: ServiceDep) -> Response:
    record, events = service.log(visitor.who, job_id)
    approval = service.store.approvals.get(record.id)
    context = {
        "visitor": visitor,
        "job": record,
        "outcome": describe(record, approval),
        "approval": approval,
        "diff": diff_lines(approval.diff) if approval is not None else [],
        "previews": previews(approval.pages or []) if approval is not None else [],
        "decide": service.may_decide(visitor.who, approval) if approval else "decided",
        "lines": frame_lines(events),
        "last_event_id": events[-1].id if events else "0",
    }
    return page(request, "job.html", context)


@router.get("/jobs/{job_id}/events")
async def job_events(
    request: Request, job_id: str, visitor: VisitorDep, service: ServiceDep, after: str = "0"
) -> Response:
    """The job page's live feed: the API's event stream, signed in by the session cookie."""
    resume = header_text(request.headers.get("last-event-id", "")) or after
    return await open_event_stream(service, visitor.who, job_id, after=resume)


@router.get("/jobs/{job_id}/log")
def job_log(
    request: Request, job_id: str, visitor: VisitorDep, service: ServiceDep, after: str = "0"
) -> Response:
    """The log lines after event ``after`` and the job's state, rendered as on the job page:
    the live script fetches this when the event stream says something happened, so each
    frame is rendered once, here, whether the page is live or not."""
    record, events = service.log(visitor.who, job_id, after=checked_event_id(after))
    context = {
        "job": record,
        "lines": frame_lines(events),
        "last_event_id": events[-1].id if events else after,
    }
    return page(request, "log.html", context)
