"""``/mcp`` on the API: the MCP tools over Streamable HTTP, behind the bearer tokens of
``/v1``.

A request's ``Host`` and ``Origin`` are checked first (bot.mcp.rebinding, the DNS-rebinding
guard: BEM-740, BEM-741). Every request is then authenticated before the MCP SDK sees it,
under the same failure throttle (BEM-712) and answered with the same problem documents
(BEM-700, BEM-701) as ``/v1``; the API's body limit wraps the whole application, ``/mcp``
included. The server is stateless: each POST carries its token and runs as its holder, so
a session id never stands for a token and one client cannot continue another's session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bot.core.errors import BeamError
from bot.http.deps import authenticated
from bot.mcp.assistant_tools import riverbeam_server
from bot.mcp.backends import ServiceBackend, skills_catalogue
from bot.mcp.rebinding import RebindingGuard
from bot.service.access import Principal
from bot.service.jobs import JobService

PATH = "/mcp"
# Where the endpoint leaves the caller for the tools; the transport hands each tool the
# Starlette request built on this very scope.
_PRINCIPAL = "riverbeam.principal"


def install(app: FastAPI, service: JobService) -> None:
    """Serve the MCP tools at ``/mcp`` as ``service``'s callers, and run the SDK's session
    manager for the application's lifetime."""
    server = riverbeam_server(
        lambda ctx: ServiceBackend(service, _caller(ctx)), catalogue=skills_catalogue
    )
    # Made for its session manager, which is then served under the API's own route, auth
    # and lifespan; the Starlette app the SDK returns is not used.
    server.streamable_http_app(
        stateless_http=True,
        max_request_body_size=service.settings.api.max_body_bytes,
        # The SDK's own DNS-rebinding guard would run after the token check and answer in
        # plain text; RebindingGuard runs first, with the API's problem documents.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    # POST only: a stateless server has no session for a GET stream to carry messages of,
    # so one would stay open and silent for as long as the client holds it, and there is
    # no session to DELETE. Other methods are the API's 405 (BEM-707, ``Allow: POST``),
    # which tells an MCP client that the endpoint offers no such stream.
    endpoint = _Authenticated(service, manager.handle_request)
    route = Route(PATH, RebindingGuard(service.settings.api, endpoint), methods=["POST"])
    app.router.routes.append(route)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(running: Any) -> AsyncIterator[Any]:
        async with manager.run(), inner(running) as state:
            yield state

    app.router.lifespan_context = lifespan


class _Authenticated:
    """The bearer token checked as ``/v1`` checks it; a refusal is raised to the API's
    problem handlers, before the MCP transport reads the body."""

    def __init__(self, service: JobService, app: ASGIApp) -> None:
        self.service = service
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise BeamError("BEM-700", "send the header 'Authorization: Bearer <token>'")
        scope[_PRINCIPAL] = authenticated(request, self.service, token.strip())
        await self.app(scope, receive, send)


def _caller(ctx: Context) -> Principal:
    request = ctx.request_context.request
    assert isinstance(request, Request), "/mcp runs on HTTP only"
    who: Principal = request.scope[_PRINCIPAL]
    return who
