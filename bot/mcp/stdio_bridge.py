"""``riverbeam mcp``: the MCP tools over stdio for a local assistant, acting through the HTTP
API as the holder of one token (so the API's roles, scopes, throttle and limits apply, and
nothing here touches Redis)."""

from __future__ import annotations

import httpx

from bot.mcp.assistant_tools import LogLevel, riverbeam_server
from bot.mcp.backends import ApiBackend

# Reading a job's event log waits at most for the API's next keep-alive.
API_TIMEOUT_SECONDS = 60.0


async def serve_stdio(api_url: str, token: str, log_level: LogLevel = "WARNING") -> None:
    """Serve until standard input ends. Logs go to standard error, warnings and errors only
    by default: an assistant shows that stream to its user, and a line per API request (the
    HTTP client's INFO log) would bury what matters."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=api_url, headers=headers, timeout=API_TIMEOUT_SECONDS
    ) as client:
        backend = ApiBackend(client)
        server = riverbeam_server(
            lambda ctx: backend, catalogue=backend.skills, log_level=log_level
        )
        await server.run_stdio_async()
