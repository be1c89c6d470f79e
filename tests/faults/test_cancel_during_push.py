"""A cancel while the approved push is in flight to a real HTTP upstream whose
``pre-receive`` hook is slow: the cancel is refused (BEM-512) rather than ending the job
``cancelled`` while the commit lands behind its back, and the job record says what reached
the upstream. Once the push has landed, a cancel is accepted again and still says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core.errors import JobError
from bot.store.models import JobState, PushState
from bot.web.outcome import describe
from harness.stack import Stack, job_stack, wait_until
from tests.faults.invariants import check_invariants
from tests.faults.kit import park, push_in_flight

pytestmark = pytest.mark.slow

HOOK_SECONDS = 4.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(serve_upstream=True) as running:
        running.start_worker("a")
        yield running


def test_a_cancel_while_the_push_is_in_flight_is_refused_and_the_push_recorded(
    stack: Stack, tmp_path: Path
) -> None:
    job, approval = park(stack)
    branch = f"riverbeam/{job.id}"
    with push_in_flight(stack, job, tmp_path / "push-in-flight", HOOK_SECONDS):
        with pytest.raises(JobError) as caught:
            stack.cancel(job.id)
        assert caught.value.code == "BEM-512"
        assert "under way" in caught.value.message
        assert (approval.commit_sha or "")[:12] in caught.value.message
        during = stack.store.jobs.get(job.id)
        assert during.state is JobState.RUNNING and not during.cancel_requested
        pushing = during.push_under_way
        assert pushing is not None and (pushing.sha, pushing.ref) == (approval.commit_sha, branch)

    done = stack.wait_for(job.id, JobState.SUCCEEDED, timeout=60)
    assert stack.upstream_ref(branch) == approval.commit_sha
    [push] = done.pushes
    assert (push.sha, push.ref, push.state) == (approval.commit_sha, branch, PushState.LANDED)
    check_invariants(stack, [job.id])


def test_a_cancel_after_the_push_landed_ends_the_job_saying_what_is_upstream(
    stack: Stack,
) -> None:
    job, approval = park(stack, "author-push-twice")
    branch = f"riverbeam/{job.id}"
    stack.decide(job.id, approve=True)
    # The first push landed and the job parked on its second one: cancel it there.
    wait_until(
        lambda: (
            stack.store.jobs.get(job.id).approval_id != approval.id
            and stack.store.jobs.get(job.id).state is JobState.AWAITING_APPROVAL
        ),
        60,
        lambda: str(stack.store.jobs.get(job.id)),
    )
    cancelled = stack.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED
    assert [(p.sha, p.state) for p in cancelled.pushes] == [(approval.commit_sha, PushState.LANDED)]
    assert stack.upstream_ref(branch) == approval.commit_sha
    shown = describe(cancelled, stack.store.approvals.get(job.id))
    assert shown.headline == "Cancelled after pushing upstream; nothing more will happen."
    assert shown.details == [f"{approval.commit_sha} on branch {branch}: landed upstream"]
    # The same record had it failed instead: the failure, then what reached the upstream.
    failed = cancelled.model_copy(update={"state": JobState.FAILED})
    assert describe(failed, None).details[-1] == shown.details[0]
    check_invariants(stack, [job.id])
