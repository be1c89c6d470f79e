"""A webhook on loopback that records every POST it gets, for the publish and schedule tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    """Answers each POST with the next of ``statuses``, then with ``status`` once they run
    out, and records it in ``requests`` (path, headers, JSON body). With ``drip_seconds``
    it answers one byte at a time, that many seconds apart, without end: a header line
    after another, until the caller hangs up (``hung_up`` is set then)."""

    status: int = 204
    drip_seconds: float | None = None
    hung_up: threading.Event = field(default_factory=threading.Event)
    statuses: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies received, in order."""
        return [request["body"] for request in self.requests]


@contextmanager
def webhook_receiver(path: str) -> Iterator[Receiver]:
    """A receiver whose ``url`` is ``path`` (a query may carry a secret) on a free port."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append(
                {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
            )
            if state.drip_seconds is not None:
                self._drip(state.drip_seconds)
                return
            self.send_response(state.statuses.pop(0) if state.statuses else state.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _drip(self, seconds: float) -> None:
            answer = b"HTTP/1.1 200 OK\r\n" + b"X-Drip: 1\r\n" * 100_000
            try:
                for byte in answer:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(seconds)
            except OSError:
                state.hung_up.set()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests read ``requests``."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
