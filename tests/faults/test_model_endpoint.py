"""A model endpoint that misbehaves under real jobs: 500s, 429 with ``Retry-After``, a body
that is not a completion, and one that never answers. The workers run the real HTTP client
(``tests.faults.stub_client``) against the stub server on loopback.

Passing failures are retried and the job goes on as if nothing happened; lasting ones fail
the job with the model code (BEM-062, BEM-063, BEM-060), mid-run included, and its container
goes with it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.core.frames import ChunkFrame
from bot.jobs.segment.segment_hooks import CHUNK_EVENT_CHARS
from bot.store.models import JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST, COMMIT_SUBJECT, FIXED_INSTALL
from harness.stack import Stack, job_stack
from harness.stub_model import (
    Hang,
    Reply,
    StubModel,
    completion,
    error,
    text_stream,
    tool_call,
)
from tests.faults.invariants import check_invariants
from tests.faults.kit import tool_called
from tests.faults.stub_client import MAX_RETRIES, URL_VARIABLE

pytestmark = pytest.mark.slow

ATTEMPTS = MAX_RETRIES + 1


@pytest.fixture(scope="module")
def stub() -> Iterator[StubModel]:
    with StubModel() as running:
        yield running


@pytest.fixture(scope="module")
def stack(stub: StubModel) -> Iterator[Stack]:
    with job_stack(model_factory="tests.faults.stub_client:for_job") as running:
        running.start_worker("a", env={URL_VARIABLE: stub.base_url})
        yield running


@pytest.fixture(autouse=True)
def _every_behaviour_used(stub: StubModel) -> Iterator[None]:
    yield
    assert stub.pending == 0, "the job made fewer model requests than the test expected"


def _calls(*items: tuple[str, dict[str, object]]) -> Reply:
    return completion(
        None,
        tool_calls=[tool_call(name, args, f"call_{i}") for i, (name, args) in enumerate(items)],
    )


def _author(stack: Stack) -> JobRecord:
    return stack.submit(JobKind.AUTHOR, "via-stub", request=AUTHOR_REQUEST)


def test_500s_are_retried_and_the_job_parks_and_pushes_once(stack: Stack, stub: StubModel) -> None:
    stub.enqueue(
        error(500, "internal error"),
        error(503, "overloaded"),
        _calls(("read_file", {"path": "docs/install.md"})),
        _calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL})),
        _calls(
            ("git_add", {"path": "docs/install.md"}), ("git_commit", {"message": COMMIT_SUBJECT})
        ),
        _calls(("git_push", {})),
    )
    job = _author(stack)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    stub.enqueue(error(502, "bad gateway"), completion("Fixed and pushed."))
    stack.decide(job.id, approve=True)
    stack.wait_for(job.id, JobState.SUCCEEDED)

    result = check_invariants(stack, [job.id])[job.id].result
    assert result is not None and result.text == "Fixed and pushed."
    assert stack.upstream_ref(f"riverbeam/{job.id}") is not None


def test_a_429_waits_as_long_as_retry_after_says(stack: Stack, stub: StubModel) -> None:
    stub.enqueue(error(429, "slow down", retry_after="1"), completion("Nothing to change."))
    job = _author(stack)
    stack.wait_for(job.id, JobState.SUCCEEDED)

    check_invariants(stack, [job.id])
    log = stack.workers["a"].log.read_text()
    assert f"failed: status 429 (slow down); retry 1 of {MAX_RETRIES} in 1.00 s" in log


def test_a_429_that_never_ends_fails_the_job_with_bem_062(stack: Stack, stub: StubModel) -> None:
    stub.enqueue(*(error(429, "slow down", retry_after="0") for _ in range(ATTEMPTS)))
    job = _author(stack)

    records = check_invariants(stack, [job.id])
    failed = records[job.id]
    assert failed.state is JobState.FAILED and failed.error is not None
    assert failed.error.code == "BEM-062" and "429" in failed.error.message


def test_a_reply_that_is_not_a_completion_fails_the_job_with_bem_063(
    stack: Stack, stub: StubModel
) -> None:
    stub.enqueue(Reply("<html>gateway page</html>", content_type="application/json"))
    job = _author(stack)

    records = check_invariants(stack, [job.id])
    failed = records[job.id]
    assert failed.state is JobState.FAILED and failed.error is not None
    assert failed.error.code == "BEM-063"


def test_an_endpoint_that_hangs_mid_run_fails_the_job_and_its_container_goes(
    stack: Stack, stub: StubModel
) -> None:
    stub.enqueue(_calls(("list_tree", {})), *(Hang() for _ in range(ATTEMPTS)))
    job = _author(stack)
    tool_called(stack, job.id, "list_tree")

    records = check_invariants(stack, [job.id])
    failed = records[job.id]
    assert failed.state is JobState.FAILED and failed.error is not None
    assert failed.error.code == "BEM-060" and "ReadTimeout" in failed.error.message


def test_workers_stream_so_the_answer_reaches_the_job_log_as_it_arrives(
    stack: Stack, stub: StubModel
) -> None:
    # Pieces of CHUNK_EVENT_CHARS or more are events of their own; shorter ones are joined.
    long = [
        f"Part {n} of the answer is long enough to be an event of its very own. " for n in range(3)
    ]
    stub.enqueue(text_stream(*long, "A", "nd the", " end."))
    job = _author(stack)

    record = check_invariants(stack, [job.id])[job.id]

    assert record.state is JobState.SUCCEEDED
    assert stub.requests[-1].json["stream"] is True
    chunks = [
        event.frame.text
        for event in stack.store.events.read(job.id, count=10_000)
        if isinstance(event.frame, ChunkFrame)
    ]
    assert all(len(piece) >= CHUNK_EVENT_CHARS for piece in long)
    assert chunks == [*long, "And the end."]


def test_a_model_refusal_ends_the_job_refused_with_its_words(stack: Stack, stub: StubModel) -> None:
    stub.enqueue(completion(None, refusal="I won't edit that page."))
    job = _author(stack)

    record = check_invariants(stack, [job.id])[job.id]

    assert record.state is JobState.REFUSED and record.error is None
    assert record.result is not None and record.result.refusal == "I won't edit that page."
