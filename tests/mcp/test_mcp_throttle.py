"""``/mcp`` shares ``/v1``'s failed-token allowance: wrong tokens sent to either count
against the client, and past the allowance even a good token is refused on both."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from harness.api_server import ApiServer, api_server
from harness.stack import Stack
from tests.api.kit import problem

ALLOWED = 3
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    table = {"auth_failures": str(ALLOWED), "auth_failure_window_seconds": "3600"}
    with api_server(stack, {"writer": ("submitter", None)}, api_table=table) as server:
        yield server


def test_wrong_tokens_at_mcp_and_v1_share_one_allowance(api: ApiServer) -> None:
    wrong = {**ACCEPT, "Authorization": "Bearer rb_wrong"}
    problem(httpx.post(f"{api.url}/mcp", json=LIST, headers=wrong), 401, "BEM-701")
    problem(httpx.get(f"{api.url}/v1/jobs", headers=wrong), 401, "BEM-701")
    problem(httpx.post(f"{api.url}/mcp", json=LIST, headers=wrong), 401, "BEM-701")
    good = {**ACCEPT, **api.auth("writer")}
    refused = problem(httpx.post(f"{api.url}/mcp", json=LIST, headers=good), 429, "BEM-712")
    assert refused["detail"]
    problem(httpx.get(f"{api.url}/v1/jobs", headers=good), 429, "BEM-712")
