"""One stack and one ``riverbeam api`` process for the job service's tests; no worker runs,
so whatever a test queues stays in the broker for it to read."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from harness.api_server import ApiServer, TokenSpec, api_server
from harness.stack import Stack, job_stack
from tests.web.kit import Web

SELF_REPO = "handbook"
"""A second repository, whose requesters may approve their own jobs."""

TOKENS: Mapping[str, TokenSpec] = {
    "writer": ("submitter", None),
    "reviewer": ("reviewer", None),
    "handbook-reviewer": ("reviewer", (SELF_REPO,)),
    "ci": ("ci", None),
    "admin": ("admin", None),
}


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    with job_stack(repositories={SELF_REPO: {"allow_self_approval": True}}) as running:
        yield running


@pytest.fixture(scope="package")
def api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, TOKENS) as server:
        yield server


@pytest.fixture(scope="package")
def web(stack: Stack, api: ApiServer) -> Web:
    return Web(stack, api)


@pytest.fixture
def configured(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The stack, with ``riverbeam`` commands run in this process pointed at it."""
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(stack.config))
    return stack
