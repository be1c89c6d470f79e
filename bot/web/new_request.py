"""The docs team's "New request" page: a form over ``POST /v1/jobs``.

It validates with the API's own model (``JobRequest``) and the same access checks, shows
each problem next to its field and queues nothing until everything holds. The form carries
an idempotency key made when it was shown, so a double submit makes one job.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from pydantic import ValidationError

from bot.core.errors import BeamError
from bot.http.deps import ServiceDep
from bot.service.access import Principal
from bot.service.jobs import JobService
from bot.service.schemas import JobRequest
from bot.store.models import JobKind
from bot.web.pages import see_other, visible_repos
from bot.web.rendering import WebRoute, page
from bot.web.visitors import FormVisitorDep, Visitor, VisitorDep

# Publish needs a finished review job to name; it is started from the API or the CLI.
FORM_KINDS = (JobKind.AUTHOR, JobKind.REVIEW, JobKind.SUMMARIZE, JobKind.COMMIT_NOTES)
KIND_LABELS = {
    "author": "Change pages (author)",
    "review": "Review a branch",
    "summarize": "Summarize a branch",
    "commit-notes": "Write commit notes for a branch",
}
FIELDS = ("repo", "kind", "request", "branch", "base", "pages")
# Which field an access refusal is about.
ACCESS_FIELDS = {"BEM-703": "repo", "BEM-702": "kind"}

router = APIRouter(route_class=WebRoute, include_in_schema=False)


def form_kinds(who: Principal) -> list[JobKind]:
    return [kind for kind in who.submittable() if kind in FORM_KINDS]


@router.get("/new")
def new_request(request: Request, visitor: VisitorDep, service: ServiceDep) -> Response:
    values = dict.fromkeys(FIELDS, "")
    return _form(request, visitor, service, values, {}, uuid.uuid4().hex)


def _form(
    request: Request,
    visitor: Visitor,
    service: JobService,
    values: dict[str, str],
    errors: dict[str, str],
    idempotency_key: str,
) -> Response:
    context = {
        "visitor": visitor,
        "repos": visible_repos(service, visitor.who),
        "kinds": form_kinds(visitor.who),
        "kind_labels": KIND_LABELS,
        "values": values,
        "errors": errors,
        "idempotency_key": idempotency_key,
    }
    return page(request, "new.html", context, status_code=422 if errors else 200)


@router.post("/new")
def submit_request(
    request: Request,
    visitor: FormVisitorDep,
    service: ServiceDep,
    repo: Annotated[str, Form()] = "",
    kind: Annotated[str, Form()] = "",
    request_text: Annotated[str, Form(alias="request")] = "",
    branch: Annotated[str, Form()] = "",
    base: Annotated[str, Form()] = "",
    pages: Annotated[str, Form()] = "",
    idempotency_key: Annotated[str, Form()] = "",
) -> Response:
    values = {
        "repo": repo,
        "kind": kind,
        "request": request_text,
        "branch": branch,
        "base": base,
        "pages": pages,
    }
    body, errors = check(service, visitor.who, values)
    if body is None:
        return _form(request, visitor, service, values, errors, idempotency_key)
    record = service.submit(visitor.who, body, idempotency_key=idempotency_key or None)
    return see_other(f"/jobs/{record.id}")


def check(
    service: JobService, who: Principal, values: dict[str, str]
) -> tuple[JobRequest | None, dict[str, str]]:
    """The request the form describes, or the problems, keyed by field ("form" for the
    rest). Nothing here queues anything."""
    if values["kind"] and values["kind"] not in {kind.value for kind in form_kinds(who)}:
        return None, {"kind": f"You may not ask for {values['kind']!r} jobs with this form."}
    try:
        body = JobRequest(
            kind=values["kind"],  # type: ignore[arg-type]
            repo=values["repo"],
            request=values["request"].strip(),
            branch=values["branch"].strip() or None,
            base=values["base"].strip() or None,
            pages=[line.strip() for line in values["pages"].splitlines() if line.strip()],
        )
    except ValidationError as error:
        return None, _field_errors(error)
    if body.repo not in service.settings.repositories:
        return None, {"repo": f"No repository named {body.repo!r} is registered."}
    try:
        who.check_submit(body.kind, body.repo)
        body.to_spec(requested_by=who.name)
    except BeamError as error:
        return None, {ACCESS_FIELDS.get(error.code, "form"): error.message}
    except ValidationError as error:
        return None, _field_errors(error)
    return body, {}


def _field_errors(error: ValidationError) -> dict[str, str]:
    errors: dict[str, str] = {}
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        where = str(item["loc"][0]) if item["loc"] else _field_named(message)
        errors.setdefault(where if where in FIELDS else "form", _sentence(message))
    return errors


def _field_named(message: str) -> str:
    """The form field a whole-request rule names ("a review job needs branch"), if any."""
    for name in FIELDS:
        if re.search(rf"\b{name}\b", message):
            return name
    return "form"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
