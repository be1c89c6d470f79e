"""Failed sign-ins and wrong bearer tokens are limited per client address: past
``api.auth_failures`` in the window, every attempt from that address is 429 (BEM-712) with a
``Retry-After``, the right token included, while other addresses go on as before."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from harness.api_server import ApiServer, api_server
from harness.stack import job_stack
from tests.api.conftest import TOKENS
from tests.api.kit import problem
from tests.web.kit import Web, hidden

FAILURES = 3
WINDOW_SECONDS = 600


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    table = {"auth_failures": str(FAILURES), "auth_failure_window_seconds": str(WINDOW_SECONDS)}
    with job_stack() as stack, api_server(stack, TOKENS, api_table=table) as api:
        yield Web(stack, api)


def _from(api: ApiServer, address: str, **kw: object) -> httpx.Client:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=api.url, transport=transport, timeout=30, **kw)  # type: ignore[arg-type]


def _retry_after(reply: httpx.Response) -> int:
    seconds = int(reply.headers["retry-after"])
    assert 0 < seconds <= WINDOW_SECONDS
    return seconds


def test_wrong_bearer_tokens_are_limited_per_address(web: Web) -> None:
    with _from(web.api, "127.0.0.2") as guesser, _from(web.api, "127.0.0.3") as other:
        for guess in range(FAILURES):
            reply = guesser.get("/v1/jobs", headers={"Authorization": f"Bearer rb_guess{guess}"})
            problem(reply, 401, "BEM-701")
        refused = guesser.get("/v1/jobs", headers={"Authorization": "Bearer rb_guess"})
        problem(refused, 429, "BEM-712")
        _retry_after(refused)
        # Even the right token: a guess that happens to be right must not be told so.
        problem(guesser.get("/v1/jobs", headers=web.api.auth("writer")), 429, "BEM-712")
        problem(
            guesser.get("/v1/jobs", headers={"Authorization": "Bearer x" * 300}), 429, "BEM-712"
        )

        assert other.get("/v1/jobs", headers=web.api.auth("writer")).status_code == 200
        problem(other.get("/v1/jobs", headers={"Authorization": "Bearer rb_x"}), 401, "BEM-701")


def test_a_request_without_a_token_is_not_counted(web: Web) -> None:
    with _from(web.api, "127.0.0.4") as client:
        for _ in range(FAILURES * 3):
            problem(client.get("/v1/jobs"), 401, "BEM-700")
        assert client.get("/v1/jobs", headers=web.api.auth("writer")).status_code == 200


def test_failed_sign_ins_are_limited_per_address_with_a_page_that_says_when(web: Web) -> None:
    browser = {"Accept": "text/html"}
    with _from(web.api, "127.0.0.5", headers=browser) as guesser:

        def attempt(token: str) -> httpx.Response:
            form = guesser.get("/sign-in")
            assert form.status_code == 200, "the sign-in page itself is never refused"
            data = {"token": token, "csrf": hidden(form.text, "csrf"), "next": "/"}
            return guesser.post("/sign-in", data=data)

        for guess in range(FAILURES):
            assert attempt(f"rb_guess{guess}").status_code == 401
        refused = attempt(web.api.tokens["writer"])
        assert refused.status_code == 429 and "BEM-712" in refused.text
        assert "riverbeam_session" not in refused.headers.get("set-cookie", "")
        _retry_after(refused)
        # The bearer door shares the count: the same address is refused there too.
        problem(guesser.get("/v1/jobs", headers=web.api.auth("writer")), 429, "BEM-712")


def test_a_client_cannot_escape_the_count_by_claiming_other_addresses(web: Web) -> None:
    """No proxy is configured: X-Forwarded-For is ignored, whoever sends it."""
    with _from(web.api, "127.0.0.1") as guesser:
        for guess in range(FAILURES):
            spoofed = {"Authorization": f"Bearer rb_g{guess}", "X-Forwarded-For": f"10.0.0.{guess}"}
            problem(guesser.get("/v1/jobs", headers=spoofed), 401, "BEM-701")
        spoofed = {"Authorization": "Bearer rb_g", "X-Forwarded-For": "10.9.9.9"}
        problem(guesser.get("/v1/jobs", headers=spoofed), 429, "BEM-712")
