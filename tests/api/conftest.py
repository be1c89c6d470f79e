"""One job service and one ``riverbeam api`` process per test module, shared by its tests.

``stack``: real Redis, one Celery worker (``a``), the ``docs`` repository and a second one,
``handbook``, on the same upstream. ``api``: the API server over it, with a token for each
holder in ``TOKENS`` (``api.auth(name)``, ``api.client(name)``).

Module scope keeps each module's counts (jobs, approvals waiting) its own while paying for
one stack start per module, not per test.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from harness.api_server import ApiServer, TokenSpec, api_server
from harness.stack import Stack, job_stack

SECOND_REPO = "handbook"

TOKENS: Mapping[str, TokenSpec] = {
    "writer": ("submitter", None),
    "writer2": ("submitter", None),
    "reviewer": ("reviewer", None),
    "reviewer2": ("reviewer", None),
    "ci": ("ci", None),
    "admin": ("admin", None),
    "scoped": ("submitter", ("docs",)),
}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(repositories={SECOND_REPO: {}}) as running:
        running.start_worker("a")
        yield running


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, TOKENS, api_table={"sse_keepalive_seconds": "0.5"}) as server:
        yield server
