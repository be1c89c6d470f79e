"""MCP clients for the tests: the SDK's own Streamable HTTP client against ``/mcp``, and its
stdio client running ``riverbeam mcp``; answers read back as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TextIO

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import CallToolResult, TextContent

from harness.api_server import ApiServer
from harness.stack import PROJECT_ROOT

TOOLS = {
    "submit_job",
    "get_job",
    "wait_for_job",
    "list_jobs",
    "list_pending_approvals",
    "cancel_job",
}


@asynccontextmanager
async def http_session(api: ApiServer, token: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30.0) as http,
        streamable_http_client(f"{api.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(
    api: ApiServer, token: str, *options: str, errlog: TextIO = sys.stderr
) -> AsyncIterator[ClientSession]:
    """``riverbeam mcp`` as an assistant starts it: a command with the token and the API's
    URL in its environment; what it writes to standard error goes to ``errlog``."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot.cli", "mcp", *options],
        env={"RIVERBEAM_TOKEN": token, "RIVERBEAM_API_URL": api.url},
        cwd=str(PROJECT_ROOT),
    )
    async with stdio_client(server, errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: Any) -> str:
    assert isinstance(result, CallToolResult), result
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def answer(
    session: ClientSession, tool: str, progress: ProgressFnT | None = None, **arguments: Any
) -> dict[str, Any]:
    """The tool's JSON answer; fails when the call was refused."""
    result = await session.call_tool(tool, arguments, progress_callback=progress)
    assert isinstance(result, CallToolResult) and not result.is_error, text(result)
    found: dict[str, Any] = json.loads(text(result))
    return found


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The BEM code of a refused call, after checking the message follows it."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult) and result.is_error, result
    code, _, message = text(result).partition(": ")
    assert result.structured_content == {"code": code, "message": message}, result
    assert code.startswith("BEM-") and message, text(result)
    return code


async def resource(session: ClientSession, uri: str) -> dict[str, Any]:
    read = await session.read_resource(uri)
    [content] = read.contents
    found: dict[str, Any] = json.loads(content.text)  # type: ignore[union-attr]
    return found


class Progress:
    """The progress notifications of one call, in the order they came."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message))
