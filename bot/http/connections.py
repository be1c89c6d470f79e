"""What one client can hold of the API's connections: how long a request's headers may take
(``api.header_timeout_seconds``) and how many connections one address may keep open at once
(``api.max_connections_per_address``).

Both are kept in uvicorn's HTTP protocol, below the ASGI app, because the app cannot see
either: it meets a request only once its headers are complete, and uvicorn has no header
timeout (its keep-alive timer runs only between requests, and a connection's first request
has no timer at all), so a client sending one header byte a second was held for as long as
it liked. ``GuardedH11Protocol`` is uvicorn's h11 protocol with two additions:

- a deadline from the moment a connection opens, or from the first byte of a later request
  on a kept-alive one, to the end of the request's headers. Past it the connection is closed:
  with ``408`` (BEM-714) when part of a request came, silently when nothing did (an answer
  nobody asked for would be read as the answer to the next request);
- a count of the open connections per client address. One over the limit is answered ``429``
  (BEM-713) and closed as soon as it is accepted, before a byte of it is read. The proxies of
  ``api.trusted_proxies`` are not counted: every client behind them shares their address, and
  the proxy limits each client itself (docs/operations.md).

The counts live in each API process, like the sign-in throttle's; with ``--workers N`` an
address may hold N times the limit.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from bot.core.errors import BeamError
from bot.http.problems import PROBLEM_TYPE, problem_document


class ConnectionGuard:
    """The limits, and the connections each client address holds in this process. Its
    ``protocol`` is what uvicorn calls for each accepted connection."""

    def __init__(
        self, *, header_timeout: float, per_address: int, exempt: Sequence[str] = ()
    ) -> None:
        self.header_timeout = header_timeout
        self.per_address = per_address
        self._everyone_exempt = "*" in exempt
        self._exempt_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        # What is not an address or a network (a Unix socket's name) is matched as written,
        # as uvicorn matches forwarded_allow_ips.
        self._exempt_names: set[str] = set()
        for entry in exempt:
            try:
                self._exempt_networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self._exempt_names.add(entry)
        self._open: Counter[str] = Counter()
        self._over: set[str] = set()

    def protocol(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> GuardedH11Protocol:
        return GuardedH11Protocol(config, server_state, app_state, _loop, guard=self)

    def counts(self, address: str) -> bool:
        """Whether connections from ``address`` count against the limit."""
        if self._everyone_exempt or address in self._exempt_names:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return True
        return not any(ip in network for network in self._exempt_networks)

    def opened(self, address: str) -> bool:
        """Count a connection from ``address``; whether it is within the limit."""
        self._open[address] += 1
        return self._open[address] <= self.per_address

    def closed(self, address: str) -> None:
        left = self._open[address] - 1
        if left > 0:
            self._open[address] = left
        else:
            del self._open[address]
        if left < self.per_address:
            self._over.discard(address)

    def first_refusal(self, address: str) -> bool:
        """Whether this is the first refusal since ``address`` went over the limit: it is
        logged once, not once per connection of a flood."""
        first = address not in self._over
        self._over.add(address)
        return first


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and the per-address limit."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        guard: ConnectionGuard,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guard = guard
        self._counted: str | None = None
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None and self._guard.counts(address):
            self._counted = address
            if not self._guard.opened(address):
                if self._guard.first_refusal(address):
                    self.logger.warning(
                        "%s holds %d connections: refusing more (api.max_connections_per_address)",
                        address,
                        self._guard.per_address,
                    )
                limit = self._guard.per_address
                self._refuse(
                    429,
                    BeamError(
                        "BEM-713",
                        f"this address holds {limit} open connections, the most allowed "
                        "(api.max_connections_per_address); close one, or reuse it",
                    ),
                )
                return
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            # The first bytes of another request on a kept-alive connection.
            self._arm_header_deadline()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        if self._counted is not None:
            self._guard.closed(self._counted)
            self._counted = None
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._header_timer = self.loop.call_later(self._guard.header_timeout, self._headers_late)

    def _disarm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        client = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
        self.logger.info("%sno request headers in %s s: closed", client, self._guard.header_timeout)
        if not self.conn.trailing_data[0]:
            self.transport.close()
            return
        seconds = self._guard.header_timeout
        self._refuse(
            408,
            BeamError(
                "BEM-714",
                f"the request's headers did not arrive within {seconds} s "
                "(api.header_timeout_seconds); send them at once",
            ),
        )

    def _refuse(self, status: int, error: BeamError) -> None:
        """Answer ``error`` and close, outside h11: no request was read to answer."""
        body = problem_document(error, status).model_dump_json(exclude_none=True).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"content-type: {PROBLEM_TYPE}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()
