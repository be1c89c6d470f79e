"""One job stack and one ``riverbeam api`` process per module, with the API tests' tokens
(``tests.api.conftest.TOKENS``): the MCP tools are held to the same roles and scopes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.api_server import ApiServer, api_server
from harness.stack import Stack, job_stack
from tests.api.conftest import SECOND_REPO, TOKENS


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(repositories={SECOND_REPO: {}}) as running:
        running.start_worker("a")
        yield running


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, TOKENS, api_table={"sse_keepalive_seconds": "0.5"}) as server:
        yield server
