"""The web pages: server-rendered (Jinja2), small, usable without JavaScript except for the
job page's live log. Reviewers sign in with their token, read the diffs waiting for them
and approve or refuse; writers submit requests and follow them (docs/web.md).

``install(app)`` adds the pages to the API's FastAPI app: same service, same operations,
same access rules.
"""

from __future__ import annotations

from fastapi import FastAPI

from bot.web import assets, new_request, pages
from bot.web.rendering import html_error_page
from bot.web.sessions import SessionStore


def install(app: FastAPI) -> None:
    """Add the pages, their sessions and the browser error pages to ``app``, whose
    ``state.service`` is already set."""
    service = app.state.service
    app.state.web_sessions = SessionStore.for_service(service.store.gateway, service.settings)
    app.state.html_error_page = html_error_page
    for module in (pages, new_request, assets):
        app.include_router(module.router)
