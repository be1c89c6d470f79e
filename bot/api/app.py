"""The FastAPI application: ``create_app(settings)`` wires the service, the routes, the web
pages and the problem-document error handlers. ``riverbeam api`` serves it with uvicorn."""

from __future__ import annotations

from fastapi import FastAPI

from bot import web
from bot.api import approvals, catalog, events, health, jobs, metrics
from bot.api.access import TokenRegistry
from bot.api.operations import Service
from bot.api.problems import install_problem_handlers
from bot.api.reload import tokens_reload_on_sighup
from bot.config import Settings, load_settings
from bot.jobs.celery_app import create_app as create_celery_app
from bot.jobs.store import JobStore


def create_app(settings: Settings | None = None, *, service: Service | None = None) -> FastAPI:
    settings = settings or load_settings()
    if service is None:
        service = Service(
            settings=settings,
            store=JobStore.for_settings(settings),
            celery=create_celery_app(settings),
            tokens=TokenRegistry(settings.api.tokens),
        )
    app = FastAPI(
        lifespan=tokens_reload_on_sighup(lambda: service.tokens),
        title="Riverbeam",
        summary="A sandboxed, git-publishing docs bot: jobs, approvals, events.",
        version="1",
        # Swagger UI and ReDoc load their scripts from a CDN: blank on an air-gapped host,
        # and against the pages' CSP. /openapi.json stays (docs/api.md).
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    install_problem_handlers(app)
    for module in (jobs, events, approvals, catalog, health, metrics):
        app.include_router(module.router)
    web.install(app)
    return app
