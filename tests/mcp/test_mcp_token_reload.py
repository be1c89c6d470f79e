"""A token removed from the configuration (and reloaded with SIGHUP) stops working through
MCP at the next call: ``/mcp`` checks the token on every request, and ``riverbeam mcp``
carries the API's refusal."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from bot.cli.tokens import token_table
from bot.config import TokenConfig
from bot.service.access import token_digest
from harness.api_server import ApiServer, api_server
from harness.stack import Stack
from tests.api.kit import SUMMARIZE
from tests.mcp.kit import answer, http_session, refusal, stdio_session

pytestmark = pytest.mark.slow


def _revoke(api: ApiServer, name: str) -> None:
    """Remove ``name``'s token from the configuration, SIGHUP the API, and wait until
    ``/v1`` refuses it."""
    entry = TokenConfig(name=name, role="submitter", sha256=token_digest(api.tokens[name]))
    original = api.config.read_text()
    assert token_table(entry) in original
    api.config.write_text(original.replace(token_table(entry), ""))
    api.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while httpx.get(f"{api.url}/v1/jobs", headers=api.auth(name)).status_code != 401:
        assert time.monotonic() < deadline, api.log_tail()
        time.sleep(0.1)


async def test_a_token_removed_on_sighup_stops_its_open_session(stack: Stack) -> None:
    with api_server(stack, {"writer": ("submitter", None)}) as api:
        async with http_session(api, api.tokens["writer"]) as session:
            await answer(session, "list_jobs")
            _revoke(api, "writer")
            # The SDK's client turns the 401 into an error of the call.
            with pytest.raises(MCPError, match="error response"):
                await session.call_tool("list_jobs", {})


async def test_a_token_removed_on_sighup_stops_riverbeam_mcp_at_its_next_call(
    stack: Stack,
) -> None:
    """``riverbeam mcp`` holds the token it was started with: once the API drops it, each
    call is the API's BEM-701 as a tool error, and the process goes on answering."""
    with api_server(stack, {"writer": ("submitter", None)}) as api:
        async with stdio_session(api, api.tokens["writer"]) as session:
            await answer(session, "list_jobs")
            _revoke(api, "writer")
            for tool, arguments in (("list_jobs", {}), ("submit_job", SUMMARIZE)):
                assert await refusal(session, tool, **arguments) == "BEM-701", tool
