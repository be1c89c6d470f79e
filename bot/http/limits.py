"""What one client can cost the API: the size of a request body, and how often it may
present a wrong token.

``BodyLimit`` is the outermost ASGI middleware: a ``Content-Length`` over ``api.max_body_bytes``
is answered 413 (BEM-711) before a byte of the body is read, and a body sent without one (or
longer than it said) is counted chunk by chunk and refused as soon as it passes the limit, so
no request makes the process hold more than the limit, authenticated or not.

``AuthThrottle`` counts failed sign-ins and unknown or malformed bearer tokens per client
address; past ``api.auth_failures`` in ``api.auth_failure_window_seconds`` every attempt
from that address is refused (429, BEM-712, with ``Retry-After``) before its token is even
looked at, so guessing is slow whatever the guesses. The counts live in the API process:
they cost no Redis round trip and keep working while Redis is down. With several API
processes behind a balancer a client gets each process's allowance.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.core.errors import BeamError
from bot.http.problems import problem_response

# Client addresses the throttle remembers; the quietest are forgotten first.
MAX_TRACKED_CLIENTS = 10_000


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body passes the limit. An HTTPException, so
    FastAPI's body reading lets it through and the problem handlers answer it (BEM-711)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes (api.max_body_bytes)")


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            request = Request(scope)
            error = BeamError(
                "BEM-711",
                f"the request body is {declared.decode(errors='replace')[:20]} bytes; "
                f"the limit is {self.max_bytes} (api.max_body_bytes)",
            )
            # The body stays unread: the server closes the connection after this answer.
            await problem_response(request, error, 413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)


class AuthThrottle:
    """Failed authentications per client address in a sliding window."""

    def __init__(self, *, failures: int, window_seconds: float) -> None:
        self._failures = failures
        self._window = window_seconds
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def check(self, client: str) -> None:
        """BEM-712, with the seconds to wait, when ``client`` used up its failures."""
        with self._lock:
            times = self._recent(client)
            if times is None or len(times) < self._failures:
                return
            wait = math.ceil(times[0] + self._window - time.monotonic())
        raise Throttled(max(1, wait))

    def failed(self, client: str) -> None:
        with self._lock:
            times = self._recent(client)
            if times is None:
                times = self._seen[client] = deque(maxlen=self._failures)
                while len(self._seen) > MAX_TRACKED_CLIENTS:
                    self._seen.popitem(last=False)
            times.append(time.monotonic())
            self._seen.move_to_end(client)

    def _recent(self, client: str) -> deque[float] | None:
        times = self._seen.get(client)
        if times is not None:
            horizon = time.monotonic() - self._window
            while times and times[0] <= horizon:
                times.popleft()
        return times


class Throttled(HTTPException):
    """429 with ``Retry-After``; the problem handlers answer it as BEM-712."""

    def __init__(self, seconds: int) -> None:
        super().__init__(
            429,
            f"too many failed sign-ins or tokens from this address; try again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


class DeliveryThrottle:
    """Signed webhook deliveries per forge: a token bucket holding a minute's allowance
    (``forges.<name>.deliveries_per_minute``), refilled evenly. A bucket of its own, apart
    from the API's clients: a flood from a forge is refused at the door, cheaply, while
    ``/v1`` goes on as before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, forge: str, per_minute: int) -> int:
        """0 when a delivery may come in now; else the seconds until one may."""
        rate = per_minute / 60.0
        with self._lock:
            now = time.monotonic()
            tokens, then = self._buckets.get(forge, (float(per_minute), now))
            tokens = min(float(per_minute), tokens + (now - then) * rate)
            if tokens >= 1.0:
                self._buckets[forge] = (tokens - 1.0, now)
                return 0
            self._buckets[forge] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / rate))


def client_address(request: Request) -> str:
    """Whom the throttle counts: the peer address, or what ``X-Forwarded-For`` says when the
    peer is one of ``api.trusted_proxies`` (uvicorn applies the header)."""
    return request.client.host if request.client else "unknown"
