"""``/mcp`` checks the token on every request: a token removed from the configuration (and
reloaded with SIGHUP) stops an MCP session that was opened with it, at its next call."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from bot.cli.tokens import token_table
from bot.config import TokenConfig
from bot.service.access import token_digest
from harness.api_server import api_server
from harness.stack import Stack
from tests.mcp.kit import answer, http_session

pytestmark = pytest.mark.slow


async def test_a_token_removed_on_sighup_stops_its_open_session(stack: Stack) -> None:
    with api_server(stack, {"writer": ("submitter", None)}) as api:
        entry = TokenConfig(
            name="writer", role="submitter", sha256=token_digest(api.tokens["writer"])
        )
        original = api.config.read_text()
        assert token_table(entry) in original
        async with http_session(api, api.tokens["writer"]) as session:
            await answer(session, "list_jobs")
            api.config.write_text(original.replace(token_table(entry), ""))
            api.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while httpx.get(f"{api.url}/v1/jobs", headers=api.auth("writer")).status_code != 401:
                assert time.monotonic() < deadline, api.log_tail()
                time.sleep(0.1)
            # The SDK's client turns the 401 into an error of the call.
            with pytest.raises(MCPError, match="error response"):
                await session.call_tool("list_jobs", {})
