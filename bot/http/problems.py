"""Errors as RFC 9457 problem documents (``application/problem+json``) carrying the BEM code.

Every error the API answers goes through here: a ``BeamError`` raised by an operation, a
request that does not match the schema, an unknown route or method, and anything
unexpected (BEM-709, with the traceback in the log, never in the answer).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match

from bot.core import jsonlimits
from bot.core.errors import CODES, BeamError

log = logging.getLogger(__name__)

PROBLEM_TYPE = "application/problem+json"

STATUS: dict[str, int] = {
    "BEM-500": 404,
    "BEM-501": 422,
    "BEM-504": 503,
    "BEM-512": 409,
    "BEM-516": 500,
    "BEM-600": 409,
    "BEM-601": 409,
    "BEM-602": 403,
    "BEM-603": 409,
    "BEM-604": 409,
    "BEM-605": 422,
    "BEM-700": 401,
    "BEM-701": 401,
    "BEM-702": 403,
    "BEM-703": 403,
    "BEM-704": 403,
    "BEM-705": 422,
    "BEM-706": 404,
    "BEM-707": 405,
    "BEM-708": 401,
    "BEM-710": 422,
    "BEM-711": 413,
    "BEM-712": 429,
    "BEM-713": 429,
    "BEM-714": 408,
    "BEM-740": 421,
    "BEM-741": 403,
    "BEM-800": 401,
    "BEM-801": 404,
    "BEM-802": 403,
    "BEM-803": 503,
    "BEM-804": 400,
    "BEM-805": 400,
    "BEM-806": 429,
}
HTTP_CODES = {404: "BEM-706", 405: "BEM-707", 413: "BEM-711", 429: "BEM-712"}
_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")

# A page-rendering fallback for browsers (the web pages install one); API paths always get
# problem documents.
HtmlErrorPage = Callable[[Request, BeamError, int], Awaitable[Response]]


class FieldProblem(BaseModel):
    loc: list[str | int]
    msg: str


class Problem(BaseModel):
    """An error answer. ``code`` is the BEM code; ``errors`` lists each invalid field."""

    type: str = Field(description="urn:riverbeam:error:<code>")
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None
    errors: list[FieldProblem] | None = None


def status_for(error: BeamError) -> int:
    return STATUS.get(error.code, 500)


def problem_document(
    error: BeamError,
    status: int,
    *,
    instance: str | None = None,
    errors: list[FieldProblem] | None = None,
) -> Problem:
    return Problem(
        type=f"urn:riverbeam:error:{error.code}",
        title=CODES[error.code].meaning,
        status=status,
        detail=error.message,
        code=error.code,
        instance=instance,
        errors=errors,
    )


def problem_response(
    request: Request,
    error: BeamError,
    status: int | None = None,
    *,
    errors: list[FieldProblem] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    status = status or status_for(error)
    problem = problem_document(error, status, instance=request.url.path, errors=errors)
    return JSONResponse(
        problem.model_dump(exclude_none=True),
        status_code=status,
        media_type=PROBLEM_TYPE,
        headers=headers,
    )


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries for the problem documents an endpoint answers with."""
    return {
        status: {"model": Problem, "description": HTTPStatus(status).phrase} for status in statuses
    }


def _problems_as_problem_json(schema: dict[str, Any]) -> None:
    """FastAPI files every documented response under the route's media type (JSON, or the
    event stream's); problem documents are ``application/problem+json``, and clients (and
    schemathesis) check that the content type they get is the one documented."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                content = response.get("content", {})
                for media_type, body in list(content.items()):
                    if body.get("schema", {}).get("$ref", "").endswith("/Problem"):
                        content[PROBLEM_TYPE] = content.pop(media_type)


def _limits_documented(schema: dict[str, Any]) -> None:
    """Every request may meet the body limit (413 on those with a body) and, with a token,
    the throttle (429): documented once here rather than on each route."""
    problem = {PROBLEM_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if method in ("post", "put", "patch"):
                responses.setdefault(
                    "413", {"description": "Content Too Large", "content": problem}
                )
            if "401" in responses:
                responses.setdefault(
                    "429",
                    {
                        "description": "Too Many Requests: see the Retry-After header",
                        "content": problem,
                    },
                )


def _wants_html(request: Request) -> bool:
    if request.url.path.startswith("/v1/") or request.url.path in ("/healthz", "/metrics"):
        return False
    return "text/html" in request.headers.get("accept", "")


def install_problem_handlers(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        _problems_as_problem_json(schema)
        _limits_documented(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def answer(
        request: Request, error: BeamError, status: int | None = None, **kw: Any
    ) -> Response:
        page: HtmlErrorPage | None = getattr(app.state, "html_error_page", None)
        if page is not None and _wants_html(request):
            response = await page(request, error, status or status_for(error))
            response.headers.update(kw.get("headers") or {})
            return response
        return problem_response(request, error, status, **kw)

    @app.exception_handler(BeamError)
    async def beam_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, BeamError)
        return await answer(request, error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        # Only where and what: pydantic's ``input`` and ``ctx`` would echo what was sent.
        fields = [
            FieldProblem(loc=[str(part) for part in item["loc"]], msg=str(item["msg"]))
            for item in error.errors()
        ]
        summary = "; ".join(f"{'.'.join(map(str, f.loc))}: {f.msg}" for f in fields[:5])
        if any(item["type"] == jsonlimits.ERROR_TYPE for item in error.errors()):
            beam = BeamError("BEM-710", f"the request is over a JSON limit: {summary}")
        else:
            beam = BeamError("BEM-705", f"the request does not match the schema: {summary}")
        return await answer(request, beam, errors=fields)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code = HTTP_CODES.get(error.status_code, "BEM-705")
        detail = str(error.detail) if error.detail else CODES[code].meaning
        headers = dict(error.headers) if error.headers else None
        if error.status_code == 405:
            # Starlette names the methods of the first route on the path only; a path that
            # several routes serve (GET and POST /v1/jobs) allows all of theirs.
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(app, request))}
        if isinstance(error.__cause__, RecursionError):
            # Python's JSON parser gave up on the body's nesting.
            code, detail = (
                "BEM-710",
                f"the body is nested deeper than {jsonlimits.MAX_DEPTH} levels",
            )
        beam = BeamError(code, f"{request.method} {request.url.path}: {detail}")
        # A body that is not JSON at all (FastAPI's 400) is answered like one that does not
        # match the schema: BEM-705 is always 422.
        status = 422 if error.status_code == 400 else error.status_code
        return await answer(request, beam, status, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        beam = BeamError("BEM-709", "the server failed unexpectedly; its log has the details")
        return await answer(request, beam, 500)


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of ``app`` answers on the request's path. Asked of the
    router method by method: routes may be nested (included routers), so their own
    ``methods`` are not all in reach."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in app.router.routes):
            allowed.append(method)
    return allowed
