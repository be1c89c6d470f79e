"""A hung Redis (SIGSTOP: connections accepted, nothing answered) against a live
``riverbeam api``: a request that needs the store gets its 503 (BEM-504) after one short
timeout, the next ones at once while the breaker is open, and the routes that need no Redis
keep answering however many requests wait on it. Each request's time is printed (``-s``);
the 8 s client timeout is far above the 2 s one timeout costs and far below the 30 s that a
request waited before (10 s socket timeout, three tries)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest

from bot.app import api_celery
from bot.config import Settings
from bot.core.errors import BeamError
from bot.service.access import Principal
from bot.service.queues import TaskQueues
from bot.store.models import JobKind, JobSpec, JobState
from harness.api_server import ApiServer, api_server
from harness.stack import REPO, job_stack, wait_until
from tests.api.conftest import TOKENS
from tests.api.kit import SUMMARIZE, problem
from tests.web.kit import Web, sign_in

CLIENT_TIMEOUT = 8.0
# More requests waiting on Redis than the API has threads for blocking work (40).
WAITING = 60


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    with job_stack() as stack, api_server(stack, TOKENS) as api:
        yield Web(stack, api)


def _timed(call: httpx.Client, method: str, path: str, **kw: object) -> httpx.Response:
    started = time.monotonic()
    reply = call.request(method, path, timeout=CLIENT_TIMEOUT, **kw)  # type: ignore[arg-type]
    print(f"{method} {path}: {reply.status_code} in {time.monotonic() - started:.2f} s")
    return reply


def _back(api: ApiServer) -> None:
    """Wait until the API reads the store again (the breaker closes by itself)."""
    with api.client("writer") as client:
        wait_until(
            lambda: client.get("/v1/jobs").status_code == 200,
            30,
            lambda: f"the API did not recover:\n{api.log_tail()}",
        )


def test_a_request_that_needs_a_hung_redis_costs_one_short_timeout(web: Web) -> None:
    job = httpx.post(f"{web.url}/v1/jobs", headers=web.api.auth("writer"), json=SUMMARIZE)
    job_id = job.json()["id"]
    calls = [
        ("GET", "/v1/jobs", {}),
        ("GET", f"/v1/jobs/{job_id}", {}),
        ("POST", "/v1/jobs", {"json": SUMMARIZE}),
        ("POST", f"/v1/jobs/{job_id}/cancel", {}),
        ("GET", "/v1/approvals", {}),
        ("GET", f"/v1/jobs/{job_id}/events", {}),
    ]
    with web.api.client("writer") as client, sign_in(web, "writer") as browser:
        with web.stack.redis.paused():
            details = [
                problem(_timed(client, method, path, **kw), 503, "BEM-504")["detail"]
                for method, path, kw in calls
            ]
            page = _timed(browser, "GET", "/jobs")
            assert page.status_code == 503 and "BEM-504" in page.text
        assert any("tried again in" in detail for detail in details), details
        _back(web.api)
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "queued"


def test_routes_that_need_no_redis_answer_while_many_requests_wait_on_it(web: Web) -> None:
    free = [
        ("/openapi.json", 200),
        ("/sign-in", 200),
        ("/static/site.css", 200),
        ("/healthz", 503),  # it names the failing store; it answers all the same
    ]
    started = threading.Event()

    def waiting(_: int) -> int | str:
        with web.api.client("writer") as client:
            started.set()
            try:
                return _timed(client, "GET", "/v1/jobs").status_code
            except httpx.TimeoutException:
                return "no answer"

    with web.stack.redis.paused(), ThreadPoolExecutor(WAITING) as pool:
        stuck = [pool.submit(waiting, index) for index in range(WAITING)]
        started.wait()
        time.sleep(0.5)  # let them reach the API before the free routes are asked
        with httpx.Client(base_url=web.url) as client:
            for path, status in free:
                reply = _timed(client, "GET", path)
                assert reply.status_code == status, (path, reply.text[:300])
        statuses = [future.result() for future in stuck]
    checks = reply.json()["checks"]  # /healthz's
    assert checks["redis"]["status"] == "failing" and checks["docker"]["status"] == "ok"
    assert set(statuses) == {503}
    _back(web.api)


def test_the_api_publisher_gives_up_on_a_hung_broker(web: Web) -> None:
    """A Redis that hangs between storing a job and queueing it: the submit fails with
    BEM-504 after the publisher's socket timeout instead of holding the request (and a
    thread) for good, and the same Idempotency-Key queues the stored job later."""
    spec = JobSpec(kind=JobKind.SUMMARIZE, repo=REPO, branch="main", requested_by="writer")
    writer = Principal.operator("writer")
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        hung = api_celery(Settings(redis_url=f"redis://127.0.0.1:{port}/0"))
        outcome: list[BaseException] = []

        def submit() -> None:
            try:
                replace(web.stack.service, queues=TaskQueues(hung)).submit(
                    writer, spec, idempotency_key="hung-broker"
                )
            except BeamError as error:
                outcome.append(error)

        started = time.monotonic()
        worker = threading.Thread(target=submit, daemon=True)
        worker.start()
        worker.join(timeout=30)
        print(f"the submit gave up after {time.monotonic() - started:.2f} s")

    assert not worker.is_alive(), "the publish still waits on a silent broker"
    [error] = outcome
    assert isinstance(error, BeamError) and error.code == "BEM-504"
    again = web.stack.service.submit(writer, spec, idempotency_key="hung-broker")
    assert again.state is JobState.QUEUED and again.id in error.message
