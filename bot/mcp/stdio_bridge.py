"""``riverbeam mcp``: the MCP tools over stdio for a local assistant, acting through the HTTP
API as the holder of one token (so the API's roles, scopes, throttle and limits apply, and
nothing here touches Redis)."""

from __future__ import annotations

import httpx

from bot.mcp.assistant_tools import riverbeam_server
from bot.mcp.backends import ApiBackend

# Reading a job's event log waits at most for the API's next keep-alive.
API_TIMEOUT_SECONDS = 60.0


async def serve_stdio(api_url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=api_url, headers=headers, timeout=API_TIMEOUT_SECONDS
    ) as client:
        backend = ApiBackend(client)
        server = riverbeam_server(lambda ctx: backend, catalogue=backend.skills)
        await server.run_stdio_async()
