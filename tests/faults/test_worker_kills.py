"""``kill -9`` of a worker process group at the worst moments: mid-run, while the relay's
push is in flight upstream, and while a decided resume waits in the queue. Each time the job
ends once, its push lands once, and the dead worker's container goes.

A killed worker's message comes back from Redis only after the visibility timeout (half an
hour with the default limits); what brings the job back within a minute is the recovery
sweep (``riverbeam.recover_jobs``, sent by beat), which these tests send as beat would once
the job's lease has run out. ``tests/jobs/test_e2e_author.py`` covers a worker killed while
its job is parked and a redelivered resume after the push landed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store.models import JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import Stack, job_stack, wait_until
from tests.faults.invariants import check_invariants
from tests.faults.kit import park, push_in_flight, recover, tool_called

pytestmark = pytest.mark.slow

LEASE_SECONDS = 2.0
HOOK_SECONDS = 3.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(lease_seconds=LEASE_SECONDS, serve_upstream=True) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test(stack: Stack) -> Iterator[None]:
    yield
    for name in list(stack.workers):
        stack.stop_worker(name)


def _relay_answer(stack: Stack, job_id: str) -> object:
    last = stack.tool_calls(job_id, "git_push")[-1].result
    assert isinstance(last, dict)
    return last["upstream"]


def test_a_worker_killed_mid_run_is_taken_over_and_pushes_once(stack: Stack) -> None:
    stack.start_worker("a")
    job = stack.submit(JobKind.AUTHOR, "author-fix-slowly", request=AUTHOR_REQUEST)
    tool_called(stack, job.id, "list_tree")
    stack.kill_worker("a")
    assert stack.sandbox_containers(job.id), "the dead worker's container is still there"

    stack.start_worker("b")
    recover(stack, job.id)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=60)
    assert parked.attempt == 2 and (parked.worker or "").startswith("b@")
    stack.decide(job.id, approve=True)
    stack.wait_for(job.id, JobState.SUCCEEDED, timeout=60)

    check_invariants(stack, [job.id])


def test_a_worker_killed_while_its_relay_push_is_in_flight_pushes_once(
    stack: Stack, tmp_path: Path
) -> None:
    stack.start_worker("a")
    job, approval = park(stack)
    branch = f"riverbeam/{job.id}"
    with push_in_flight(stack, job, tmp_path / "push-in-flight", HOOK_SECONDS):
        stack.kill_worker("a")
        # The upstream finishes the push its client no longer waits for.
        wait_until(lambda: stack.upstream_ref(branch) == approval.commit_sha, 30, lambda: branch)
    assert stack.store.jobs.get(job.id).state is JobState.RUNNING

    stack.start_worker("b")
    recover(stack, job.id)
    done = stack.wait_for(job.id, JobState.SUCCEEDED, timeout=60)

    assert done.attempt == 3  # run, the killed resume, the takeover
    # The killed worker's push is unknown (it died mid-push); the takeover's landed.
    assert [(p.sha, p.state.value) for p in done.pushes] == [
        (approval.commit_sha, "unknown"),
        (approval.commit_sha, "landed"),
    ]
    assert done.pushes[-1].already_there
    sha = approval.commit_sha
    assert _relay_answer(stack, job.id) == {
        "branch": branch,
        "sha": sha,
        "pushed": False,
        "already_there": True,
    }
    check_invariants(stack, [job.id])


def test_a_resume_queued_when_the_worker_is_killed_runs_on_the_next_one(stack: Stack) -> None:
    stack.start_worker("a")
    waiting, approval = park(stack)
    busy = stack.submit(JobKind.AUTHOR, "author-fix-slowly", request=AUTHOR_REQUEST)
    tool_called(stack, busy.id, "list_tree")  # worker a's one pool process is taken
    stack.decide(waiting.id, approve=True)  # so the resume waits in the queue
    stack.kill_worker("a")
    assert stack.store.jobs.get(waiting.id).state is JobState.AWAITING_APPROVAL

    stack.start_worker("b")
    done = stack.wait_for(waiting.id, JobState.SUCCEEDED, timeout=60)
    assert done.result is not None and done.result.outcome is not None
    recover(stack, busy.id)
    stack.wait_for(busy.id, JobState.AWAITING_APPROVAL, timeout=60)
    stack.decide(busy.id, approve=True)
    stack.wait_for(busy.id, JobState.SUCCEEDED, timeout=60)

    records = check_invariants(stack, [waiting.id, busy.id])
    assert stack.upstream_ref(f"riverbeam/{waiting.id}") == approval.commit_sha
    assert records[busy.id].attempt == 3  # run, the takeover, the resume
