"""``GET /healthz``: can this deployment run a job right now?

Five checks, run at once, each in a thread of its own pool with a short timeout, so the
probe answers within ``CHECK_TIMEOUT_SECONDS`` (plus a little) whatever hangs:

- ``redis``: the job store's Redis answers PING;
- ``broker``: the Celery broker (the same Redis, ``redis_url``) accepts a connection, made
  the way Celery makes it;
- ``docker``: the Docker engine on this host answers a ping;
- ``image``: the engine holds the sandbox image the code on this host expects
  (``riverbeam-sandbox:<content hash>``). The hash covers every source file that goes into
  the image; it is computed at most once per ``IMAGE_PLAN_TTL_SECONDS``, and each probe
  only asks the engine for the tag;
- ``workers``: every job queue has a worker that answers on the broker's control channel
  within ``WORKERS_PING_SECONDS`` (the body lists, per queue, the workers that answered).

With ``api.health_engine = false`` (an API that has no Docker engine, as in the compose
deployment) ``docker`` and ``image`` are not checked: the workers check them at start.

200 when every check passes, 503 when one fails; the body is the same ``Health`` document
either way, naming each check, its status, a detail, and the BEM code of a failure. No token
is needed: a load balancer or an orchestrator probes it. The answer names hosts and ports
but never a URL, which may carry a password.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Literal

import redis
from celery import Celery
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from kombu import Connection
from pydantic import BaseModel, Field
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.config import Settings
from bot.core.errors import BeamError
from bot.jobs.workers import active_queues, queues_served
from bot.service.jobs import JobService
from bot.store.gateway import describe_redis

router = APIRouter(tags=["operations"])

CHECK_TIMEOUT_SECONDS = 3.0
# A control-channel broadcast collects replies for the whole wait: it sets the probe's floor.
WORKERS_PING_SECONDS = 1.0
IMAGE_PLAN_TTL_SECONDS = 60.0
# Probes that hang (an engine that accepts and never answers) hold a thread each until their
# own socket timeouts end them; a pool of their own keeps them from starving anything else.
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="riverbeam-health")


class Check(BaseModel):
    status: Literal["ok", "failing"]
    detail: str
    code: str | None = Field(default=None, description="the BEM code of a failure")
    duration_ms: float


class Health(BaseModel):
    status: Literal["ok", "failing"] = Field(description="ok when every check is ok")
    checks: dict[str, Check] = Field(
        description="redis, broker, workers, and docker and image unless api.health_engine is false"
    )
    workers: dict[str, list[str]] = Field(
        default_factory=dict,
        description="each job queue and the workers that answered a ping consuming it",
    )


class ExpectedImage:
    """The sandbox image tag the code on this host expects, recomputed after a TTL: hashing
    every source file on each probe would cost more than the probe itself."""

    def __init__(self, settings: Settings, ttl_seconds: float = IMAGE_PLAN_TTL_SECONDS) -> None:
        self._settings = settings
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._ref: str | None = None
        self._at = 0.0

    def ref(self) -> str:
        from sandbox.host.image.build import plan_image

        with self._lock:
            if self._ref is None or time.monotonic() - self._at > self._ttl:
                self._ref = plan_image(self._settings, fetch=False).ref
                self._at = time.monotonic()
            return self._ref


def _fail_fast_redis(url: str, timeout: float) -> redis.Redis:
    """A client that fails fast: short socket timeouts and no retries, for probes and
    scrapes (the store's own client retries, which a probe must not wait for)."""
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def check_redis(settings: Settings) -> str:
    client = _fail_fast_redis(settings.redis_url, CHECK_TIMEOUT_SECONDS)
    try:
        client.ping()
    except redis.RedisError as error:
        raise BeamError(
            "BEM-504", f"the job store (Redis at {describe_redis(client)}) does not answer: {error}"
        ) from None
    finally:
        client.close()
    return f"Redis at {describe_redis(client)} answered PING"


@contextmanager
def _broker_connection(celery: Celery) -> Iterator[Connection]:
    """A broker connection made the way Celery makes it, but failing fast: one attempt
    (Celery's own default retries for a long time) and a read timeout."""
    try:
        with celery.connection_for_write(
            connect_timeout=CHECK_TIMEOUT_SECONDS,
            # Without a read timeout, a broker that accepts and never answers would hold
            # the probe's thread for good.
            transport_options={"socket_timeout": CHECK_TIMEOUT_SECONDS},
        ) as connection:
            # For Redis, kombu's connection opens a channel, which pings the server.
            connection.ensure_connection(max_retries=0)
            yield connection
    except Exception as error:  # kombu raises transport-specific errors
        raise BeamError(
            "BEM-504", f"the Celery broker does not accept a connection: {error}"
        ) from None


def check_broker(celery: Celery) -> str:
    with _broker_connection(celery) as connection:
        where = f"{connection.hostname}:{connection.port}"
    return f"the broker at {where} accepted a connection (it is redis_url, like the store)"


def check_docker() -> str:
    from sandbox.host.engine import connect

    client = connect(timeout=CHECK_TIMEOUT_SECONDS)
    try:
        return f"the Docker engine answered (API {client.api.api_version})"
    finally:
        client.close()


def check_image(expected: ExpectedImage) -> str:
    from sandbox.host.engine import connect, engine_errors

    ref = expected.ref()
    client = connect(timeout=CHECK_TIMEOUT_SECONDS)
    try:
        with engine_errors("BEM-401", f"looking up the sandbox image {ref}"):
            client.images.get(ref)
    finally:
        client.close()
    return f"{ref} is present"


def check_workers(celery: Celery, served: dict[str, list[str]], *, forges: bool = False) -> str:
    """Every job queue (with ``forges``, the forge events' too) has a worker that answers;
    ``served`` is filled with who serves what."""
    with _broker_connection(celery) as connection:
        by_worker = active_queues(celery, WORKERS_PING_SECONDS, connection=connection)
    served.update(queues_served(by_worker, forges=forges))
    idle = [queue for queue, workers in served.items() if not workers]
    answering = sorted(by_worker)
    if idle:
        raise BeamError(
            "BEM-535",
            f"no worker serves {', '.join(idle)}: jobs sent there wait. Start one "
            f"(`riverbeam worker`); answering: {', '.join(answering) or 'none'}",
        )
    return f"{len(answering)} worker(s) answered; every job queue is served"


async def _run(probe: Callable[[], str]) -> Check:
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        detail = await asyncio.wait_for(
            loop.run_in_executor(_POOL, probe), timeout=CHECK_TIMEOUT_SECONDS
        )
    except TimeoutError:
        return _failed(started, f"no answer within {CHECK_TIMEOUT_SECONDS:g} s", None)
    except BeamError as error:
        return _failed(started, error.message, error.code)
    except Exception as error:  # a probe's unexpected failure is a failed check, not a 500
        return _failed(started, f"{type(error).__name__}: {error}", None)
    return Check(status="ok", detail=detail, duration_ms=_since(started))


def _failed(started: float, detail: str, code: str | None) -> Check:
    return Check(status="failing", detail=detail, code=code, duration_ms=_since(started))


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def _expected_image(request: Request, settings: Settings) -> ExpectedImage:
    # Per app, so apps built for different settings (tests) never share a cached tag.
    expected: ExpectedImage | None = getattr(request.app.state, "expected_image", None)
    if expected is None:
        expected = request.app.state.expected_image = ExpectedImage(settings)
    return expected


async def health(service: JobService, expected: ExpectedImage) -> Health:
    served: dict[str, list[str]] = {}
    probes: dict[str, Callable[[], str]] = {
        "redis": lambda: check_redis(service.settings),
        "broker": lambda: check_broker(service.queues.app),
        "workers": lambda: check_workers(
            service.queues.app, served, forges=bool(service.settings.forges)
        ),
    }
    if service.settings.api.health_engine:
        # An API without the engine (only the workers have it) leaves these to the workers,
        # which refuse to start without the sandbox image.
        probes |= {"docker": check_docker, "image": lambda: check_image(expected)}
    results = await asyncio.gather(*(_run(probe) for probe in probes.values()))
    checks = dict(zip(probes, results, strict=True))
    ok = all(check.status == "ok" for check in checks.values())
    return Health(status="ok" if ok else "failing", checks=checks, workers=served)


@router.get(
    "/healthz",
    response_model=Health,
    summary="Health of Redis, the broker, the Docker engine, the sandbox image and the workers",
    responses={503: {"model": Health, "description": "a check failed; the body names it"}},
)
async def healthz(request: Request) -> JSONResponse:
    """200 when every check passes, 503 when one fails; the same body either way."""
    service: JobService = request.app.state.service
    answer = await health(service, _expected_image(request, service.settings))
    return JSONResponse(
        answer.model_dump(mode="json"),
        status_code=200 if answer.status == "ok" else 503,
        headers={"Cache-Control": "no-store"},
    )
