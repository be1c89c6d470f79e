"""A live ``riverbeam api`` refuses a body over ``api.max_body_bytes`` before reading it: a
large ``Content-Length`` at once, a streamed body as soon as it passes the limit, signed in
or not. The process's peak memory (VmHWM) shows what the attempts cost it."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from harness.api_server import ApiServer, api_server
from harness.stack import job_stack
from tests.api.conftest import TOKENS
from tests.api.kit import PROBLEM_TYPE, SUMMARIZE

ATTACK_BYTES = 100 << 20
CHUNK = 64 << 10
# What four attempts may add to the process's peak memory; before the limit, four 100 MB
# bodies added about 680 MiB.
ALLOWED_GROWTH = 64 << 20


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with job_stack() as stack, api_server(stack, TOKENS) as server:
        yield server


def _peak_rss(api: ApiServer) -> int:
    """The API process's peak resident memory, in bytes."""
    for line in Path(f"/proc/{api.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def _answer(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the response on ``conn`` (the server closes it)."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
        if b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            headers = dict(line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:])
            if len(rest) >= int(headers.get("content-length", "0")):
                return int(head.split()[1]), headers, rest
    raise AssertionError(f"the connection closed before a whole answer: {data!r}")


def _post(api: ApiServer, path: str, *, declared: bool, content_type: str) -> tuple[int, bytes]:
    """POST ``ATTACK_BYTES`` to ``path``, with or without a Content-Length, sending until the
    server answers; the status and the body of its answer."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        length = f"Content-Length: {ATTACK_BYTES}" if declared else "Transfer-Encoding: chunked"
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
            f"{length}\r\n\r\n".encode()
        )
        sent = 0
        block = b"x" * CHUNK
        piece = block if declared else b"%x\r\n%s\r\n" % (CHUNK, block)
        try:
            while sent < ATTACK_BYTES and not select.select([conn], [], [], 0)[0]:
                conn.sendall(piece)
                sent += CHUNK
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: its answer may still be readable
        status, headers, body = _answer(conn)
        assert sent < ATTACK_BYTES, "the server read the whole body"
        assert headers["content-type"] == PROBLEM_TYPE
        return status, body


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_four_unauthenticated_100_mb_bodies_are_413_before_they_are_read(
    api: ApiServer, declared: bool
) -> None:
    before = _peak_rss(api)
    paths = [("/v1/jobs", "application/json")] * 2 + [
        ("/sign-in", "application/x-www-form-urlencoded"),
        ("/new", "application/x-www-form-urlencoded"),
    ]
    with ThreadPoolExecutor(len(paths)) as pool:
        answers = list(
            pool.map(lambda p: _post(api, p[0], declared=declared, content_type=p[1]), paths)
        )

    for status, body in answers:
        assert status == 413
        assert json.loads(body)["code"] == "BEM-711"
    growth = _peak_rss(api) - before
    print(f"peak RSS {before >> 20} MiB -> {(before + growth) >> 20} MiB")
    assert growth < ALLOWED_GROWTH


def test_a_body_under_the_limit_is_read_as_before(api: ApiServer) -> None:
    reply = httpx.post(
        f"{api.url}/v1/jobs",
        headers=api.auth("writer"),
        json={**SUMMARIZE, "request": "r" * 20_000},
    )

    assert reply.status_code == 201, reply.text
