"""The DNS-rebinding guard of ``/mcp`` (bot.mcp.rebinding): a foreign ``Host`` is 421
(BEM-740) and a foreign ``Origin`` 403 (BEM-741), before the token is read; the loopback
names and the configured ``api.mcp_allowed_hosts`` are served; ``/v1`` is not concerned."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from pydantic import ValidationError

from bot.config import ApiSettings
from bot.mcp.rebinding import allowed_hosts, host_allowed, origin_allowed
from harness.api_server import ApiServer, api_server
from harness.stack import job_stack
from tests.api.kit import problem

LOOPBACK = ApiSettings().mcp_allowed_hosts
PUBLIC = "riverbeam.example.com"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "rebinding-test", "version": "1"},
    },
}


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8123", True),
        ("localhost", True),
        ("LocalHost:1", True),
        ("localhost.:1", True),
        ("[::1]:8123", True),
        ("evil.example.com", False),
        ("evil.example.com:8123", False),
        ("127.0.0.1.evil.example.com:8123", False),
        ("localhost.evil.example.com", False),
        ("localhost:8123:1", False),
        ("localhost:http", False),
        ("[::1", False),
        ("[::2]:8123", False),
        ("", False),
    ],
)
def test_a_host_matches_the_loopback_defaults_or_not(host: str, allowed: bool) -> None:
    assert host_allowed(host, LOOPBACK) is allowed


@pytest.mark.parametrize(
    ("pattern", "host", "allowed"),
    [
        (PUBLIC, PUBLIC, True),
        (PUBLIC, f"{PUBLIC}:443", False),
        (f"{PUBLIC}:443", f"{PUBLIC}:443", True),
        (f"{PUBLIC}:443", f"{PUBLIC}:8443", False),
        (f"{PUBLIC}:*", f"{PUBLIC}:8443", True),
        (f"{PUBLIC}:*", PUBLIC, True),
        (PUBLIC, f"www.{PUBLIC}", False),
        ("*", "anything.example.net:1", True),
    ],
)
def test_a_configured_pattern_names_its_port(pattern: str, host: str, allowed: bool) -> None:
    assert host_allowed(host, (pattern,)) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://127.0.0.1:8123", True),
        ("https://localhost", True),
        ("http://[::1]:8123", True),
        ("http://evil.example.com", False),
        ("http://evil.example.com:8123", False),
        ("null", False),
        ("file://localhost", False),
        ("http://localhost:8123/page", False),
        ("http://user@localhost:8123", False),
        ("http://[::1", False),
        ("", False),
    ],
)
def test_an_origin_must_be_http_of_an_allowed_host(origin: str, allowed: bool) -> None:
    assert origin_allowed(origin, LOOPBACK) is allowed


@pytest.mark.parametrize(
    ("host", "own"),
    [("127.0.0.1", "127.0.0.1:8000"), (PUBLIC, f"{PUBLIC}:8000"), ("::1", "[::1]:8000")],
)
def test_the_api_s_own_address_is_allowed_unless_it_is_every_address(host: str, own: str) -> None:
    assert allowed_hosts(ApiSettings(host=host)) == (*LOOPBACK, own)
    for anywhere in ("0.0.0.0", "::"):
        assert allowed_hosts(ApiSettings(host=anywhere)) == LOOPBACK


@pytest.mark.parametrize(
    "pattern", ["http://riverbeam.example.com", "a b", "example.com/mcp", "host:port", "*.x"]
)
def test_a_pattern_that_is_not_a_host_is_a_configuration_error(pattern: str) -> None:
    with pytest.raises(ValidationError):
        ApiSettings(mcp_allowed_hosts=(pattern,))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ApiServer, ApiServer]]:
    """Two APIs on one stack: the default, and one that lists only a public name."""
    public = {"mcp_allowed_hosts": json.dumps([PUBLIC])}
    with (
        job_stack() as stack,
        api_server(stack, {"assistant": ("submitter", None)}) as default,
        api_server(stack, {"assistant": ("submitter", None)}, api_table=public) as named,
    ):
        yield default, named


def _initialize(api: ApiServer, token: bool = True, **headers: str) -> httpx.Response:
    sent = {"Accept": "application/json, text/event-stream", **headers}
    if token:
        sent.update(api.auth("assistant"))
    return httpx.post(f"{api.url}/mcp", json=INITIALIZE, headers=sent, timeout=30)


def _port(api: ApiServer) -> str:
    return api.url.rsplit(":", 1)[1]


@pytest.mark.parametrize("token", [True, False])
def test_a_foreign_host_is_refused_before_the_token(
    servers: tuple[ApiServer, ApiServer], token: bool
) -> None:
    default, _ = servers
    for host in ("evil.example.com", f"evil.example.com:{_port(default)}"):
        reply = _initialize(default, token, Host=host, Origin=f"http://{host}")
        assert "evil.example.com" in problem(reply, 421, "BEM-740")["detail"]


def test_a_foreign_origin_is_refused_under_a_loopback_host(
    servers: tuple[ApiServer, ApiServer],
) -> None:
    default, _ = servers
    for origin in ("http://evil.example.com", "null", f"https://{PUBLIC}"):
        reply = _initialize(default, Origin=origin)
        problem(reply, 403, "BEM-741")


def test_the_loopback_names_are_served_by_default(servers: tuple[ApiServer, ApiServer]) -> None:
    default, _ = servers
    port = _port(default)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        for origin in ({}, {"Origin": f"http://{host}"}):
            reply = _initialize(default, Host=host, **origin)
            assert reply.status_code == 200, reply.text
            assert "riverbeam" in reply.text


def test_a_configured_public_name_is_served_and_replaces_the_loopback_names(
    servers: tuple[ApiServer, ApiServer],
) -> None:
    _, named = servers
    for origin in ({}, {"Origin": f"https://{PUBLIC}"}):
        reply = _initialize(named, Host=PUBLIC, **origin)
        assert reply.status_code == 200, reply.text
    problem(_initialize(named, Host=f"localhost:{_port(named)}"), 421, "BEM-740")
    problem(_initialize(named, Host=PUBLIC, Origin="http://localhost"), 403, "BEM-741")


def test_v1_answers_under_any_name(servers: tuple[ApiServer, ApiServer]) -> None:
    """The guard is /mcp's: /v1 takes bearer tokens a rebinding page cannot send (and the
    web pages a session cookie and CSRF token it cannot send either; docs/security.md)."""
    default, _ = servers
    headers = {"Host": "evil.example.com", **default.auth("assistant")}
    reply = httpx.get(f"{default.url}/v1/jobs", headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
