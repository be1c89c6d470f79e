"""Templates, the security headers every page carries, and error pages for browsers."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from bot.core.errors import CODES, BeamError
from bot.core.tools import mcp_call

# Scripts and styles come from our own files only: no inline script, so an injected <script>
# would not run even if escaping ever failed.
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}
# Sign-in errors that a browser answers by going to the sign-in page.
SIGN_IN_CODES = frozenset({"BEM-700", "BEM-701", "BEM-708"})

templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.PackageLoader("bot.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
)
# An approval of an MCP call shows the server and the tool apart (the model's name joins them).
templates.env.filters["mcp_call"] = mcp_call


def secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    # Pages show private jobs and diffs: no shared cache keeps them.
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def page(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> Response:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


class WebRoute(APIRoute):
    """A route of the web pages: its answers carry the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_headers(request: Request) -> Response:
            return secured(await handler(request))

        return with_headers


def sign_in_url(next_path: str) -> str:
    return f"/sign-in?next={quote(next_path, safe='/')}"


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path on this site, never another site."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    return value


async def html_error_page(request: Request, error: BeamError, status: int) -> Response:
    """The error as a page. A page that needs a sign-in sends the browser to sign in and
    back; a form posted without one is told to sign in, since its content cannot follow."""
    if error.code in SIGN_IN_CODES and request.method == "GET":
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return secured(RedirectResponse(sign_in_url(path), status_code=303))
    context = {
        "visitor": None,
        "code": error.code,
        "meaning": CODES[error.code].meaning if error.code in CODES else "",
        "message": error.message,
        "status": status,
        "sign_in": error.code in SIGN_IN_CODES,
    }
    return secured(page(request, "error.html", context, status_code=status))
