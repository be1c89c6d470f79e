"""``riverbeam mcp``: serve the MCP tools over stdio for a local assistant (Claude Desktop,
an IDE), through the HTTP API with ``$RIVERBEAM_TOKEN`` (docs/mcp.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from bot.cli.ci import TOKEN_ENV, URL_ENV
from bot.cli.service import LOG_LEVELS
from bot.core.errors import BeamError


def add_mcp_command(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve Riverbeam's MCP tools over stdio, through the API",
        description=f"An MCP server on standard input and output for a local assistant. It "
        f"acts through the HTTP API at ${URL_ENV} (or --api-url) as the holder of the token "
        f"in ${TOKEN_ENV}; no tool approves or refuses a push. See docs/mcp.md.",
    )
    mcp.add_argument("--api-url", metavar="URL", help=f"the API's base URL (default: ${URL_ENV})")
    mcp.add_argument(
        "--loglevel",
        choices=LOG_LEVELS,
        default="WARNING",
        help="what is logged to standard error (default: warnings and errors only)",
    )
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    import anyio

    from bot.mcp.stdio_bridge import serve_stdio

    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise BeamError("BEM-700", f"set {TOKEN_ENV} to an API token (`riverbeam tokens new`)")
    url = args.api_url or os.environ.get(URL_ENV, "").strip()
    if not url:
        raise BeamError("BEM-900", f"set {URL_ENV} or pass --api-url with the API's base URL")
    anyio.run(serve_stdio, url, token, args.loglevel)
    return 0
