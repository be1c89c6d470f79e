"""``/healthz``: green with the whole service up; red (503), naming the failed check, when
Redis is unreachable or silent, or the sandbox image is missing.

The red cases run the same app in this process on settings that break one thing, so the
shared Redis and image stay as they are for the rest of the module.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bot.app import create_app
from bot.config import Settings
from bot.jobs.workers import job_queues
from harness.api_server import ApiServer
from harness.redis_server import redis_server
from harness.stack import Stack
from harness.workers import free_port

CHECKS = {"redis", "broker", "docker", "image", "workers"}


async def _probe(settings: Settings) -> tuple[int, dict[str, Any]]:
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://riverbeam") as client:
        reply = await client.get("/healthz")
    return reply.status_code, reply.json()


def _failing(body: dict[str, Any]) -> dict[str, str | None]:
    return {
        name: check["code"]
        for name, check in body["checks"].items()
        if check["status"] == "failing"
    }


@contextmanager
def _silent_port() -> Iterator[int]:
    """A port whose listener accepts connections and never answers: a hung Redis."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_everything_up_is_200_with_every_check_ok_and_needs_no_token(
    api: ApiServer, stack: Stack
) -> None:
    reply = httpx.get(f"{api.url}/healthz", timeout=30)

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == CHECKS
    assert _failing(body) == {}
    assert "answered PING" in body["checks"]["redis"]["detail"]
    assert f"{stack.settings.sandbox.image}:" in body["checks"]["image"]["detail"]
    assert reply.headers["cache-control"] == "no-store"
    # The stack's one worker serves every job queue.
    assert set(body["workers"]) == set(job_queues())
    assert all(len(workers) == 1 for workers in body["workers"].values()), body["workers"]


async def test_a_missing_image_is_503_naming_the_image_check(stack: Stack) -> None:
    sandbox = stack.settings.sandbox.model_copy(update={"image": "riverbeam-sandbox-absent"})
    status, body = await _probe(stack.settings.model_copy(update={"sandbox": sandbox}))

    assert status == 503
    assert body["status"] == "failing"
    assert _failing(body) == {"image": "BEM-401"}
    assert "riverbeam-sandbox-absent:" in body["checks"]["image"]["detail"]
    assert "riverbeam sandbox build" in body["checks"]["image"]["detail"]


async def test_an_api_without_the_engine_leaves_the_engine_checks_to_the_workers(
    stack: Stack,
) -> None:
    # The compose deployment's API: no socket, and a sandbox image it could not see anyway.
    sandbox = stack.settings.sandbox.model_copy(update={"image": "riverbeam-sandbox-absent"})
    api = stack.settings.api.model_copy(update={"health_engine": False})
    status, body = await _probe(stack.settings.model_copy(update={"sandbox": sandbox, "api": api}))

    assert status == 200, body
    assert set(body["checks"]) == CHECKS - {"docker", "image"}
    assert set(body["workers"]) == set(job_queues())


async def test_an_unreachable_redis_is_503_naming_redis_and_the_broker(stack: Stack) -> None:
    port = free_port()
    status, body = await _probe(
        stack.settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"})
    )

    assert status == 503
    assert _failing(body) == {"redis": "BEM-504", "broker": "BEM-504", "workers": "BEM-504"}
    assert f"127.0.0.1:{port}" in body["checks"]["redis"]["detail"]
    assert body["checks"]["docker"]["status"] == "ok"


async def test_a_redis_that_never_answers_fails_its_check_instead_of_hanging(stack: Stack) -> None:
    with _silent_port() as port:
        url = f"redis://127.0.0.1:{port}/0"
        status, body = await _probe(stack.settings.model_copy(update={"redis_url": url}))

    assert status == 503
    assert set(_failing(body)) == {"redis", "broker", "workers"}
    for name in ("redis", "broker"):
        detail = body["checks"][name]["detail"]
        assert "Timeout" in detail or "no answer within" in detail, detail


async def test_no_worker_on_the_broker_is_503_naming_the_queues(
    stack: Stack, tmp_path: Path
) -> None:
    # A Redis of its own: a broker no worker listens on.
    with redis_server(tmp_path) as url:
        status, body = await _probe(stack.settings.model_copy(update={"redis_url": url}))

    assert status == 503
    assert _failing(body) == {"workers": "BEM-535"}
    detail = body["checks"]["workers"]["detail"]
    assert all(queue in detail for queue in job_queues()) and "answering: none" in detail
    assert body["workers"] == {queue: [] for queue in job_queues()}
