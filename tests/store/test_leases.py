"""Claims and leases against a real redis-server: one winner, take-over once a lease ran
out, resumes that apply a decision once."""

from __future__ import annotations

import time

import pytest

from bot.store.models import Approval, ApprovalState, JobRecord, JobState
from bot.store.store import JobStore
from tests.store.kit import author, parked, race, seen


def test_claim_runs_the_job_once_and_a_duplicate_claim_is_a_no_op(store: JobStore) -> None:
    record = store.jobs.create(author())
    claimed = store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    assert claimed is not None
    assert (claimed.state, claimed.worker, claimed.attempt) == (JobState.RUNNING, "w1", 1)
    assert claimed.lease_until is not None
    assert 29 < (claimed.lease_until - claimed.updated_at).total_seconds() <= 30
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=30) is None
    assert store.jobs.claim(record.id, worker="w2", lease_seconds=30) is None
    assert store.jobs.get(record.id) == claimed


def test_two_workers_claiming_one_job_exactly_one_wins(store: JobStore) -> None:
    for _ in range(10):
        job_id = store.jobs.create(author()).id

        def claim(i: int, job_id: str = job_id) -> JobRecord | None:
            return store.jobs.claim(job_id, worker=f"w{i}", lease_seconds=30)

        results = race(4, claim)
        winners = [result for result in results if isinstance(result, JobRecord)]
        assert len(winners) == 1 and results.count(None) == 3
        assert store.jobs.get(job_id).worker == winners[0].worker


def test_an_expired_lease_is_taken_over_and_the_old_worker_is_locked_out(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=0.2)
    time.sleep(0.3)
    taken = store.jobs.claim(record.id, worker="w2", lease_seconds=30)
    assert taken is not None
    assert (taken.worker, taken.attempt) == ("w2", 2)
    assert not store.leases.renew(record.id, worker="w1", lease_seconds=30)
    late = store.jobs.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, owner="w1"
    )
    assert late is None


def test_expired_leases_lists_only_running_jobs_whose_worker_stopped_renewing(
    store: JobStore,
) -> None:
    dead, alive, done = (store.jobs.create(author()).id for _ in range(3))
    for job_id in (dead, alive, done):
        store.jobs.claim(job_id, worker="w1", lease_seconds=0.2)
    store.jobs.transition(done, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    waiting = parked(store)
    time.sleep(0.3)
    assert store.leases.renew(alive, worker="w1", lease_seconds=30)
    assert store.leases.expired() == [dead]
    # Taken over: the new lease is live, so the job is off the list.
    assert store.jobs.claim(dead, worker="w2", lease_seconds=30) is not None
    assert store.leases.expired() == []
    # A resume holds a lease too; it runs out when its worker dies.
    store.approvals.decide(waiting.id, binding=seen(store, waiting.id), approve=True, by="bob")
    assert store.jobs.claim_resume(waiting.id, worker="w3", lease_seconds=0.2) is not None
    time.sleep(0.3)
    assert store.leases.expired() == [waiting.id]


def test_renew_lease_extends_only_the_holders_lease(store: JobStore) -> None:
    record = store.jobs.create(author())
    claimed = store.jobs.claim(record.id, worker="w1", lease_seconds=1)
    assert claimed is not None and claimed.lease_until is not None
    assert store.leases.renew(record.id, worker="w1", lease_seconds=60)
    renewed = store.jobs.get(record.id)
    assert renewed.lease_until is not None
    assert renewed.lease_until > claimed.lease_until
    assert renewed.version == claimed.version + 1
    assert not store.leases.renew(record.id, worker="w2", lease_seconds=60)
    store.jobs.transition(record.id, JobState.FAILED, from_states={JobState.RUNNING})
    assert not store.leases.renew(record.id, worker="w1", lease_seconds=60)


def test_claim_resumes_a_parked_job_when_asked_to(store: JobStore) -> None:
    record = parked(store)
    assert store.jobs.claim(record.id, worker="w2", lease_seconds=30) is None  # queued only
    resumed = store.jobs.claim(
        record.id, worker="w2", lease_seconds=30, from_states={JobState.AWAITING_APPROVAL}
    )
    assert resumed is not None and resumed.attempt == 2
    with pytest.raises(ValueError):
        store.jobs.claim(record.id, worker="w2", lease_seconds=30, from_states={JobState.FAILED})


def test_claim_resume_waits_for_a_decision_then_applies_it_once(store: JobStore) -> None:
    record = parked(store)
    assert store.jobs.claim_resume(record.id, worker="w2", lease_seconds=30) is None
    store.approvals.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    claimed = store.jobs.claim_resume(record.id, worker="w2", lease_seconds=30)
    assert claimed is not None
    job, approval = claimed
    assert (job.state, job.worker, job.attempt) == (JobState.RUNNING, "w2", 2)
    assert (approval.state, approval.applied) == (ApprovalState.APPROVED, True)
    assert store.approvals.get(record.id) == approval
    assert store.jobs.claim_resume(record.id, worker="w3", lease_seconds=30) is None


def test_concurrent_resumes_apply_one_decision_exactly_once(store: JobStore) -> None:
    record = parked(store)
    store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=False, by="bob", comment="not this week"
    )

    def resume(i: int) -> tuple[JobRecord, Approval] | None:
        return store.jobs.claim_resume(record.id, worker=f"w{i}", lease_seconds=30)

    results = race(10, resume)
    winners = [result for result in results if isinstance(result, tuple)]
    assert len(winners) == 1 and results.count(None) == 9
    assert store.jobs.get(record.id).worker == winners[0][0].worker
