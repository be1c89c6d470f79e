"""``riverbeam api``: the HTTP API and web pages, served by uvicorn."""

from __future__ import annotations

import argparse
import socket
from typing import Any

from bot.cli.service import LOG_LEVELS
from bot.core.errors import BeamError


def add_api_command(commands: Any) -> None:
    api = commands.add_parser(
        "api",
        help="serve the HTTP API and the web pages",
        description="Serve the HTTP API (OpenAPI at /openapi.json) and the web pages with "
        "uvicorn, on api.host and api.port unless given here. Put a TLS-terminating proxy in "
        "front of anything but loopback.",
    )
    api.add_argument("--host", help="address to listen on (default: api.host)")
    api.add_argument("--port", type=int, help="port (default: api.port)")
    api.add_argument("--workers", type=int, default=1, metavar="N", help="uvicorn worker processes")
    api.add_argument("--loglevel", choices=LOG_LEVELS, default="INFO")
    api.set_defaults(handler=_api)


def _api(args: argparse.Namespace) -> int:
    import uvicorn

    from bot.config import load_settings
    from bot.http.connections import ConnectionGuard

    settings = load_settings()
    host, port = args.host or settings.api.host, args.port or settings.api.port
    check_can_listen(host, port)
    guard = ConnectionGuard(
        header_timeout=settings.api.header_timeout_seconds,
        per_address=settings.api.max_connections_per_address,
        exempt=settings.api.trusted_proxies,
    )
    uvicorn.run(
        "bot.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=args.workers,
        # uvicorn has no header timeout and no per-address limit: its h11 protocol with both
        # (bot/http/connections.py). uvicorn calls the factory as it would a protocol class.
        http=guard.protocol,  # type: ignore[arg-type]
        # No WebSocket handover: a connection stays with the guarded protocol to its end.
        ws="none",
        log_level=args.loglevel.lower(),
        # X-Forwarded-For names the client the sign-in throttle counts: believed from the
        # configured proxies only, never from whoever connects (uvicorn's default trusts
        # any local process, which could then claim a new address with every guess).
        proxy_headers=bool(settings.api.trusted_proxies),
        forwarded_allow_ips=list(settings.api.trusted_proxies) or None,
        # The event streams end with their jobs; a shutdown should not wait on the long ones.
        timeout_graceful_shutdown=5,
    )
    return 0


def check_can_listen(host: str, port: int) -> None:
    """BEM-906 when ``host:port`` cannot be bound, before uvicorn tries and exits with a code
    of its own. Bound the way uvicorn binds (``SO_REUSEADDR``), so a port in TIME_WAIT passes
    and a port another process listens on does not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise BeamError("BEM-906", f"cannot listen on {host}:{port}: {error}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise BeamError(
                "BEM-906",
                f"cannot listen on {host}:{port}: {error.strerror}; stop the process that holds "
                "it, or choose another port (--port, or api.port in riverbeam.toml)",
            ) from None
