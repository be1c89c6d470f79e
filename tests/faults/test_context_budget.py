"""The context budget under a real author job: a repository with a 1 MiB page and 300 other
pages, a model scripted to read widely (the real HTTP client against the loopback stub), and
the bodies the client sent measured at 4 bytes a token.

With ``model.context_window = 32768`` the largest request stays under 32k tokens; the same
job with the budget off goes far over. Both figures are printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bot.store.models import JobKind, JobState
from harness.stack import Stack, job_stack
from harness.stub_model import StubModel, completion, tool_call
from tests.faults.invariants import check_invariants
from tests.faults.stub_client import URL_VARIABLE

pytestmark = pytest.mark.slow

WINDOW = 32_768
BYTES_PER_TOKEN = 4
PAGES = 300
BRANCH = "big-handbook"


def _page(number: int) -> str:
    line = f"Page {number} explains one more part of the handbook in plain words.\n"
    return f"# Page {number}\n\n" + line * 60


def _huge() -> str:
    line = "The archive keeps every release note ever written, line after line.\n"
    body = line * ((1 << 20) // len(line))
    return body + "x" * ((1 << 20) - len(body))


@pytest.fixture(scope="module")
def stub() -> Iterator[StubModel]:
    with StubModel() as running:
        yield running


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(model_factory="tests.faults.stub_client:for_job") as running:
        files = {f"docs/page-{n:03}.md": _page(n) for n in range(PAGES)}
        files["docs/archive.md"] = _huge()
        running.push_branch(BRANCH, files, "A big handbook")
        yield running


def _reads(start: int, count: int, *extra: str) -> object:
    paths = [*extra, *(f"docs/page-{n:03}.md" for n in range(start, start + count))]
    calls = [
        tool_call("read_file", json.dumps({"path": path}), f"call_{start}_{i}")
        for i, path in enumerate(paths)
    ]
    return completion(None, tool_calls=calls)


def _script() -> list[object]:
    """Seven replies: the tree, the archive and 15 pages, 64 more pages, the answer."""
    return [
        completion(None, tool_calls=[tool_call("list_tree", "{}", "call_tree")]),
        _reads(0, 15, "docs/archive.md"),
        *(_reads(15 + 16 * n, 16) for n in range(4)),
        completion("I read the handbook widely; nothing needs changing."),
    ]


def _largest_request_tokens(stack: Stack, stub: StubModel, worker_env: dict[str, str]) -> int:
    stub.requests.clear()
    stub.enqueue(*_script())  # type: ignore[arg-type]
    stack.start_worker("w", env={URL_VARIABLE: stub.base_url, **worker_env})
    try:
        job = stack.submit(JobKind.AUTHOR, "via-stub", request="Read the handbook", base=BRANCH)
        record = check_invariants(stack, [job.id])[job.id]
    finally:
        stack.stop_worker("w")
    assert record.state is JobState.SUCCEEDED, record.error
    assert len(stub.requests) == len(_script())
    return max(len(request.body) for request in stub.requests) // BYTES_PER_TOKEN


def test_the_largest_request_stays_under_the_budget_and_goes_over_without_it(
    stack: Stack, stub: StubModel, capsys: pytest.CaptureFixture[str]
) -> None:
    within = _largest_request_tokens(stack, stub, {"RIVERBEAM_MODEL__CONTEXT_WINDOW": str(WINDOW)})
    without = _largest_request_tokens(stack, stub, {"RIVERBEAM_MODEL__CONTEXT_BUDGET": "false"})

    with capsys.disabled():
        print(
            f"\ncontext budget ({PAGES} pages + a 1 MiB page, {len(_script())} requests):"
            f" largest request {within:,} tokens with a {WINDOW:,}-token window,"
            f" {without:,} tokens without the budget"
        )
    assert within < WINDOW < without
