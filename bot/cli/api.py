"""``riverbeam api``: the HTTP API and web pages, served by uvicorn."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli.service import LOG_LEVELS


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

    settings = load_settings()
    uvicorn.run(
        "bot.api.app:create_app",
        factory=True,
        host=args.host or settings.api.host,
        port=args.port or settings.api.port,
        workers=args.workers,
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
