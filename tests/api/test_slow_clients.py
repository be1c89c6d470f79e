"""Slow clients against a live ``riverbeam api``: slowloris connections that send one header
byte a second are closed at ``api.header_timeout_seconds`` (408, BEM-714), connections past
``api.max_connections_per_address`` from one address are refused at once (429, BEM-713), and
other clients are answered meanwhile. Before the limits, 300 such connections stayed open
for as long as they liked and the API's descriptors went from 7 to 408."""

from __future__ import annotations

import json
import math
import os
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from bot.http.connections import ConnectionGuard
from harness.api_server import ApiServer, api_server
from harness.stack import job_stack
from tests.api.conftest import TOKENS

HEADER_SECONDS = 2.5  # between the drips, which come on whole seconds
CAP = 4
PROXY = "127.0.0.9"
LIMITS = {
    "header_timeout_seconds": str(HEADER_SECONDS),
    "max_connections_per_address": str(CAP),
    "trusted_proxies": f'["{PROXY}"]',
}
# The count of slowloris connections from one address.
ATTACKERS = 300
# A request line and the start of the headers, sent at once; then one byte a second.
OPENING = b"GET /v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
DRIP = b"X-Slow: " + b"a" * 60


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with job_stack() as stack, api_server(stack, TOKENS, api_table=LIMITS) as server:
        yield server


@dataclass
class Conn:
    """One raw connection, what it received, and when the server closed it."""

    sock: socket.socket
    opened: float
    drip: bytes = b""
    received: bytes = b""
    closed_after: float | None = None

    def status(self) -> int | None:
        line = self.received.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else None

    def problem_code(self) -> str:
        return str(json.loads(self.received.partition(b"\r\n\r\n")[2])["code"])

    def gone(self) -> None:
        if self.closed_after is None:
            self.closed_after = time.monotonic() - self.opened


_OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


def _connect(api: ApiServer, address: str, opening: bytes = b"", drip: bytes = b"") -> Conn:
    host, port = api.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5, source_address=(address, 0))
    _OPENED.append(sock)
    sock.setblocking(False)
    conn = Conn(sock, time.monotonic(), drip)
    if opening:
        sock.send(opening)
    return conn


def _watch(
    conns: list[Conn], seconds: float, at: dict[float, Callable[[], None]] | None = None
) -> None:
    """Read every connection until the server closes it, for up to ``seconds``, sending the
    next byte of each one's drip every second and running ``at``'s calls at their times."""
    start = time.monotonic()
    pending = dict(sorted((at or {}).items()))
    next_drip = 1.0
    while (elapsed := time.monotonic() - start) < seconds:
        for when in [when for when in pending if when <= elapsed]:
            pending.pop(when)()
        live = [conn for conn in conns if conn.closed_after is None]
        if not live and not pending:
            return
        if elapsed >= next_drip:
            next_drip += 1.0
            for conn in live:
                if conn.drip:
                    try:
                        conn.sock.send(conn.drip[:1])
                        conn.drip = conn.drip[1:]
                    except OSError:
                        conn.gone()
        wait = min([next_drip, *pending, seconds]) - (time.monotonic() - start)
        readable, _, _ = select.select([c.sock for c in live], [], [], max(0.0, min(wait, 0.05)))
        for conn in live:
            if conn.sock in readable:
                try:
                    data = conn.sock.recv(65536)
                except OSError:
                    data = b""
                conn.received += data
                if not data:
                    conn.gone()


def _signed_in(api: ApiServer) -> bytes:
    """The opening, then a token and the end of the headers: a whole request."""
    return OPENING + f"Authorization: Bearer {api.tokens['writer']}\r\n\r\n".encode()


def _answered(conn: Conn) -> None:
    """Read one whole answer (headers and a ``Content-Length`` body) from ``conn``."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        head, end, body = conn.received.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head.lower())
        if end and length and len(body) >= int(length[1]):
            return
        if select.select([conn.sock], [], [], 0.1)[0]:
            conn.received += conn.sock.recv(65536)
    raise AssertionError(f"no whole answer: {conn.received[:200]!r}")


def _descriptors(api: ApiServer) -> int:
    return len(os.listdir(f"/proc/{api.process.pid}/fd"))


def _client_from(api: ApiServer, address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=api.url, transport=transport, headers=api.auth("writer"))


@dataclass
class Meanwhile:
    """What was seen while the slow connections were held."""

    descriptors: int = 0
    slow_open: int = 0
    status: int = 0
    seconds: float = 0.0


def test_slowloris_is_closed_at_the_header_deadline_and_capped_per_address(
    api: ApiServer,
) -> None:
    before = _descriptors(api)
    slow = [_connect(api, "127.0.0.2", OPENING, DRIP) for _ in range(CAP)]
    # The rest of the 300 send nothing: whatever they receive is the server's own doing.
    extra = [_connect(api, "127.0.0.2") for _ in range(ATTACKERS - CAP)]
    seen = Meanwhile()

    def meanwhile() -> None:
        seen.descriptors = _descriptors(api)
        seen.slow_open = sum(conn.closed_after is None for conn in slow)
        started = time.monotonic()
        with _client_from(api, "127.0.0.3") as other:
            seen.status = other.get("/v1/agents").status_code
        seen.seconds = time.monotonic() - started

    _watch(slow + extra, HEADER_SECONDS + 2.5, at={1.2: meanwhile})
    lasted = sorted(conn.closed_after or math.inf for conn in slow)
    refused = [conn.closed_after or math.inf for conn in extra]
    print(
        f"\n{ATTACKERS} slowloris connections from one address: {CAP} held for "
        f"{lasted[0]:.2f}-{lasted[-1]:.2f} s; of the other {len(extra)}, "
        f"{sum(map(math.isfinite, refused))} refused, in {max(refused) * 1000:.0f} ms at most; "
        f"API descriptors {before} before, "
        f"{seen.descriptors} during; another client answered in {seen.seconds * 1000:.0f} ms"
    )

    # Well before the header deadline: refused when accepted, not timed out.
    assert max(refused) < 1.5, "connections past the cap are refused as soon as accepted"
    assert {conn.status() for conn in extra} == {429}
    assert {conn.problem_code() for conn in extra} == {"BEM-713"}

    assert seen.slow_open == CAP, "the slow ones are held until their deadline"
    assert seen.status == 200 and seen.seconds < 1.0
    assert seen.descriptors <= before + CAP + 8

    assert all(HEADER_SECONDS - 0.2 < seconds < HEADER_SECONDS + 1.5 for seconds in lasted)
    assert all(len(conn.drip) < len(DRIP) for conn in slow), "they were dripping"
    assert {conn.status() for conn in slow} == {408}
    assert {conn.problem_code() for conn in slow} == {"BEM-714"}

    # Their connections closed, the address is served again.
    with _client_from(api, "127.0.0.2") as again:
        assert again.get("/v1/agents").status_code == 200


def test_every_wait_for_headers_has_the_deadline(api: ApiServer) -> None:
    """A connection that says nothing is closed without an answer; on a kept-alive
    connection, the next request's headers have the same deadline from their first byte."""
    quiet = _connect(api, "127.0.0.4")
    kept = _connect(api, "127.0.0.5", _signed_in(api))
    _answered(kept)
    assert kept.status() == 200, kept.received[:200]
    kept.received = b""
    kept.opened = time.monotonic()
    kept.drip = OPENING

    _watch([quiet, kept], HEADER_SECONDS + 2.5)

    assert quiet.closed_after is not None and quiet.received == b""
    assert HEADER_SECONDS - 0.2 < quiet.closed_after < HEADER_SECONDS + 1.5
    # The first byte goes at 1 s, and the deadline runs from it.
    assert kept.closed_after is not None
    assert HEADER_SECONDS + 0.8 < kept.closed_after < HEADER_SECONDS + 2.0
    assert kept.status() == 408 and kept.problem_code() == "BEM-714"


def test_a_trusted_proxy_is_not_capped(api: ApiServer) -> None:
    """Every client behind a proxy shares its address; the proxy limits each one itself."""
    conns = [_connect(api, PROXY, OPENING) for _ in range(CAP + 3)]
    _watch(conns, 0.5)
    assert all(conn.closed_after is None for conn in conns)
    last = conns[-1]
    last.sock.send(_signed_in(api).removeprefix(OPENING))
    _answered(last)
    assert last.status() == 200


def test_the_proxies_not_counted_are_matched_as_uvicorn_trusts_them() -> None:
    """Addresses, networks and literal names (a Unix socket), as in api.trusted_proxies."""
    guard = ConnectionGuard(
        header_timeout=1, per_address=1, exempt=("10.0.0.0/8", "::1", "fd00::/8", "proxy.sock")
    )
    for address in ("10.1.2.3", "::1", "fd00::7", "proxy.sock"):
        assert not guard.counts(address), address
    for address in ("11.0.0.1", "::2", "127.0.0.1", "other.sock"):
        assert guard.counts(address), address
    assert not ConnectionGuard(header_timeout=1, per_address=1, exempt=("*",)).counts("1.2.3.4")
    assert guard.opened("11.0.0.1") and not guard.opened("11.0.0.1")
    guard.closed("11.0.0.1")
    guard.closed("11.0.0.1")
    assert guard.opened("11.0.0.1"), "a closed connection gives its place back"
