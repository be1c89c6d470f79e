"""The loopback HTTP server a fake forge runs on (``harness.fake_github``,
``harness.fake_gitlab``): a thread serving 127.0.0.1 on a free port, each request read
whole and handed to the fake's ``serve``, its answer sent back with a ``Content-Length``;
and the failures a test scripts (``fail``), which the fake answers in its forge's error
shape::

    class FakeForge(LoopbackFake):
        def serve(self, method, target, headers, body):
            return 200, {"Content-Type": "application/json"}, b"{}"

    with FakeForge() as fake:
        httpx.get(fake.origin + "/")
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self


@dataclass
class Failure:
    """The next ``times`` requests of ``name`` (an operation of the fake's, ``"*"`` any)
    are answered ``status`` with ``headers`` and the forge's error body saying ``message``."""

    name: str
    status: int
    headers: dict[str, str]
    message: str
    times: int


class LoopbackFake:
    DEFAULT_FAILURE = "Server Error"

    def __init__(self) -> None:
        self._failures: list[Failure] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self  # type: ignore[attr-defined]
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """The status, headers and body answering one request (``headers`` lower-cased)."""
        raise NotImplementedError

    def fail(
        self,
        name: str,
        status: int,
        *,
        headers: Mapping[str, str] | None = None,
        message: str | None = None,
        times: int = 1,
    ) -> None:
        """Script the next ``times`` answers of ``name`` (see ``Failure``)."""
        said = self.DEFAULT_FAILURE if message is None else message
        self._failures.append(Failure(name, status, dict(headers or {}), said, times))

    def scripted(self, name: str) -> Failure | None:
        """The failure that answers this request of ``name``, if one is scripted."""
        for failure in self._failures:
            if failure.times > 0 and failure.name in ("*", name):
                failure.times -= 1
                return failure
        return None

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test reads the fake's ``requests`` instead."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        fake: LoopbackFake = self.server.fake  # type: ignore[attr-defined]
        status, out, payload = fake.serve(self.command, self.path, headers, body)
        self.send_response(status)
        for key, value in out.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
