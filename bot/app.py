"""The FastAPI application: ``create_app(settings)`` wires the service, the routes, the web
pages and the problem-document error handlers. ``riverbeam api`` serves it with uvicorn."""

from __future__ import annotations

from celery import Celery
from fastapi import FastAPI

from bot import web
from bot.api import (
    approval_routes,
    catalog,
    event_routes,
    forge_routes,
    health,
    job_routes,
    metrics,
)
from bot.api.reload import tokens_reload_on_sighup
from bot.config import Settings, load_settings
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.door import WebhookDoor
from bot.http.limits import AuthThrottle, BodyLimit, DeliveryThrottle
from bot.http.problems import install_problem_handlers
from bot.jobs.celery_app import create_app as create_celery_app
from bot.mcp import streamable
from bot.service.access import TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import TaskQueues
from bot.store.store import JobStore
from sandbox.host.container.reaper import reap_after_cancel


def create_app(settings: Settings | None = None, *, service: JobService | None = None) -> FastAPI:
    settings = settings or load_settings()
    if service is None:
        store = JobStore.for_settings(settings, api=True)
        service = JobService(
            settings=settings,
            store=store,
            queues=TaskQueues(api_celery(settings)),
            tokens=TokenRegistry(settings.api.tokens),
            after_cancel=reap_after_cancel(store.gateway.deployment),
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
        # No redirect from /path/ to /path: Starlette builds its Location from the Host
        # header, which the client chooses. An unknown path is a 404 (BEM-706).
        redirect_slashes=False,
    )
    app.state.service = service
    app.state.auth_throttle = AuthThrottle(
        failures=settings.api.auth_failures,
        window_seconds=settings.api.auth_failure_window_seconds,
    )
    app.state.webhook_door = WebhookDoor(
        settings, Deliveries(service.store.gateway), service.queues
    )
    app.state.delivery_throttle = DeliveryThrottle()
    app.add_middleware(BodyLimit, max_bytes=settings.api.max_body_bytes)
    install_problem_handlers(app)
    routes = (job_routes, event_routes, approval_routes, catalog, health, metrics, forge_routes)
    for module in routes:
        app.include_router(module.router)
    web.install(app)
    streamable.install(app, service)
    return app


def api_celery(settings: Settings) -> Celery:
    """The Celery app the API queues tasks with. Its broker is the store's Redis, so a
    publish waits no longer for a hung Redis than the store does."""
    celery = create_celery_app(settings)
    timeout = settings.api.redis_timeout_seconds
    options = dict(celery.conf.broker_transport_options)
    options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    celery.conf.update(
        broker_transport_options=options,
        broker_connection_timeout=timeout,
        # One quick retry for a dropped connection; Celery's default of three would let a
        # Redis that hung just after the job was stored hold the request four timeouts.
        task_publish_retry_policy={
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.2,
        },
        # The API never reads a task's result; the Redis result backend would subscribe to
        # each one as it is sent, on connections without these timeouts.
        result_backend=None,
    )
    return celery
