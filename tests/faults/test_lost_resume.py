"""A decided push whose resume message is lost outright: deleted from the broker's queue in
Redis, as a purge, an operator's mistake or a broker that lost its last second of writes
would. The decision is recorded, nothing carries it to a worker, and without the resume
sweep (``riverbeam.resume_decided``, sent by beat every minute) the job would wait in
``awaiting_approval`` forever. The sweep sends the resume again once the decision is older
than ``jobs.resume_grace_seconds``, and the push lands once; two sweeps (two resumes) still
push once, because the first resume's claim marks the decision applied.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.service.queues import RESUME_JOB, queue_for, send_resume_sweep
from bot.store.models import JobKind, JobState
from harness.broker import queued_tasks
from harness.stack import Stack, job_stack, wait_until
from tests.faults.invariants import check_invariants
from tests.faults.kit import park

# Alone (the serial pass): under the parallel pass's load, its worker twice did not finish
# the parked segment's task within 30 s of SIGTERM (2026-12-07; cause not found yet, the
# harness now dumps the worker's threads when that happens).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

GRACE_SECONDS = 1.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(more_config={"jobs": {"resume_grace_seconds": GRACE_SECONDS}}) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test(stack: Stack) -> Iterator[None]:
    yield
    for name in list(stack.workers):
        stack.stop_worker(name)


def _resume_messages(stack: Stack, job_id: str) -> list[tuple[str, bytes]]:
    """(queue list key, raw message) of each queued resume of the job."""
    return [
        (queued.key, queued.raw)
        for queued in queued_tasks(stack.store.gateway.client, queue_for(JobKind.AUTHOR))
        if queued.task == RESUME_JOB and queued.args == [job_id]
    ]


def _park_and_decide_with_no_worker(stack: Stack) -> tuple[str, str]:
    """A parked author job, approved while no worker runs: its resume waits in the broker.
    Returns the job id and the approved commit."""
    stack.start_worker("a")
    job, approval = park(stack)
    stack.stop_worker("a")
    stack.decide(job.id, approve=True)
    assert approval.commit_sha is not None
    return job.id, approval.commit_sha


def _decision_overdue(stack: Stack, job_id: str) -> None:
    def overdue() -> bool:
        found = stack.store.approvals.unapplied_decisions(older_than=GRACE_SECONDS)
        return job_id in [record.id for record in found]

    wait_until(
        overdue,
        30,
        lambda: f"job {job_id}'s decision never showed as overdue",
    )


def test_a_resume_deleted_from_the_broker_is_sent_again_and_the_push_lands_once(
    stack: Stack,
) -> None:
    job_id, sha = _park_and_decide_with_no_worker(stack)
    ((key, raw),) = _resume_messages(stack, job_id)
    assert stack.store.gateway.client.lrem(key, 0, raw) == 1  # the message is lost
    assert _resume_messages(stack, job_id) == []

    stack.start_worker("b")
    assert stack.store.jobs.get(job_id).state is JobState.AWAITING_APPROVAL
    _decision_overdue(stack, job_id)
    send_resume_sweep(stack.app)  # as beat does every minute
    stack.wait_for(job_id, JobState.SUCCEEDED, timeout=60)

    records = check_invariants(stack, [job_id])
    assert stack.upstream_ref(f"riverbeam/{job_id}") == sha
    assert records[job_id].attempt == 2  # the park, the one resume
    # Applied: the next sweep finds nothing to send, and its index holds nothing of the job.
    assert stack.worker("sweeper").resume_decided(stack.app) == []


def test_a_resume_sent_twice_by_two_sweeps_pushes_once(stack: Stack) -> None:
    job_id, sha = _park_and_decide_with_no_worker(stack)
    _decision_overdue(stack, job_id)
    sweeper = stack.worker("sweeper")
    # The first resume is only slow, not lost: each sweep sends one more.
    assert sweeper.resume_decided(stack.app) == [job_id]
    assert sweeper.resume_decided(stack.app) == [job_id]
    assert len(_resume_messages(stack, job_id)) == 3

    stack.start_worker("b")
    stack.wait_for(job_id, JobState.SUCCEEDED, timeout=60)
    wait_until(
        lambda: not _resume_messages(stack, job_id),
        30,
        lambda: f"resumes of {job_id} still queued:\n{stack.log_tails()}",
    )

    records = check_invariants(stack, [job_id])
    assert stack.upstream_ref(f"riverbeam/{job_id}") == sha
    assert records[job_id].attempt == 2  # one resume ran, the two others found it applied


def test_a_decision_on_a_job_cancelled_before_its_resume_leaves_the_sweep(stack: Stack) -> None:
    job_id, _ = _park_and_decide_with_no_worker(stack)
    for key, raw in _resume_messages(stack, job_id):
        stack.store.gateway.client.lrem(key, 0, raw)
    stack.store.jobs.request_cancel(job_id)
    assert (
        stack.store.gateway.client.zscore("rbtest:approvals:decided", job_id) is not None
    )  # still indexed: the sweep is what cleans it

    assert stack.store.approvals.unapplied_decisions(older_than=0) == []
    assert stack.store.gateway.client.zscore("rbtest:approvals:decided", job_id) is None
    check_invariants(stack, [job_id])
