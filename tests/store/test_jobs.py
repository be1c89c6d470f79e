"""Job records against a real redis-server: create, idempotency, transitions under real
concurrency, cancel in every state, pushes upstream."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from bot.core.errors import ApprovalError, BeamError, JobError
from bot.core.frames import ErrorInfo
from bot.store.models import (
    Approval,
    ApprovalState,
    AuthorOutcome,
    JobRecord,
    JobResult,
    JobState,
    PushState,
)
from bot.store.store import JobStore
from tests.store.kit import author, code_of, parked, race, seen

# jobs ----------------------------------------------------------------------------------


def test_create_stores_a_queued_job_that_get_reads_back(store: JobStore) -> None:
    record = store.jobs.create(author())
    assert record.state is JobState.QUEUED
    assert record.version == 0 and record.attempt == 0
    assert record.created_at == record.updated_at
    assert store.jobs.get(record.id) == record
    assert store.jobs.create(author()).id != record.id


def test_unknown_jobs_are_bem_500_everywhere(store: JobStore) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.jobs.get("nope"),
        lambda: store.jobs.transition("nope", JobState.FAILED, from_states={JobState.QUEUED}),
        lambda: store.jobs.claim("nope", worker="w", lease_seconds=1),
        lambda: store.leases.renew("nope", worker="w", lease_seconds=1),
        lambda: store.jobs.request_cancel("nope"),
        lambda: store.approvals.decide("nope", approve=False, by="bob", binding=None)[0],
    ]
    assert [code_of(call) for call in calls] == ["BEM-500"] * len(calls)
    assert store.jobs.is_final_or_unknown("nope")


def test_a_retried_create_with_the_same_key_returns_the_same_job(
    store: JobStore, client: redis.Redis
) -> None:
    first = store.jobs.create(author(), idempotency_key="req-1")
    again = store.jobs.create(author(), idempotency_key="req-1")
    assert again == first
    assert store.jobs.create(author(), idempotency_key="req-2").id != first.id
    assert client.zcard(store.gateway.keys.jobs) == 2
    ttl = client.ttl(store.gateway.keys.idem("req-1"))
    assert 23 * 3600 < ttl <= 24 * 3600


def test_an_idempotency_key_reused_for_another_request_is_refused(store: JobStore) -> None:
    store.jobs.create(author("one"), idempotency_key="k")
    with pytest.raises(JobError) as caught:
        store.jobs.create(author("two"), idempotency_key="k")
    assert caught.value.code == "BEM-501"
    assert "different request" in caught.value.message


def test_concurrent_creates_with_one_key_make_one_job(store: JobStore, client: redis.Redis) -> None:
    results = race(12, lambda _: store.jobs.create(author(), idempotency_key="burst"))
    assert all(isinstance(result, JobRecord) for result in results)
    assert len({result.id for result in results if isinstance(result, JobRecord)}) == 1
    assert client.zcard(store.gateway.keys.jobs) == 1


def test_transition_sets_fields_and_bumps_version_and_updated_at(store: JobStore) -> None:
    record = store.jobs.create(author())
    running = store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    assert running is not None
    result = JobResult(text="done", outcome=AuthorOutcome(branch="riverbeam/x"))
    done = store.jobs.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, result=result
    )
    assert done is not None
    assert done.state is JobState.SUCCEEDED
    assert done.version == running.version + 1
    assert done.updated_at > running.updated_at
    assert done.result == result
    assert done.lease_until is None  # a job that stopped running holds no lease
    assert done.worker == "w1"  # who ran it stays on record
    assert store.jobs.get(record.id) == done


def test_transition_is_none_when_the_job_moved_on(store: JobStore) -> None:
    record = store.jobs.create(author())
    assert store.jobs.transition(record.id, JobState.FAILED, from_states={JobState.RUNNING}) is None
    stale = store.jobs.transition(
        record.id, JobState.CANCELLED, from_states={JobState.QUEUED}, expect_version=7
    )
    assert stale is None
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    not_mine = store.jobs.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, owner="w2"
    )
    assert not_mine is None
    assert store.jobs.get(record.id).version == 1


@pytest.mark.parametrize(
    ("from_state", "to"),
    [
        (JobState.QUEUED, JobState.AWAITING_APPROVAL),
        (JobState.SUCCEEDED, JobState.RUNNING),
        (JobState.CANCELLED, JobState.FAILED),
        (JobState.AWAITING_APPROVAL, JobState.SUCCEEDED),
    ],
)
def test_a_move_the_state_machine_forbids_is_a_programming_error(
    store: JobStore, from_state: JobState, to: JobState
) -> None:
    record = store.jobs.create(author())
    with pytest.raises(ValueError, match="cannot move"):
        store.jobs.transition(record.id, to, from_states={from_state})


@pytest.mark.parametrize("field", ["state", "version", "id", "spec", "updated_at", "nonsense"])
def test_transition_refuses_fields_only_the_store_sets(store: JobStore, field: str) -> None:
    record = store.jobs.create(author())
    changes: dict[str, Any] = {field: 1}
    with pytest.raises(ValueError, match=field):
        store.jobs.transition(record.id, JobState.FAILED, from_states={JobState.QUEUED}, **changes)


def test_concurrent_transitions_never_lose_an_update(store: JobStore) -> None:
    record = store.jobs.create(author())
    start = store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    assert start is not None
    # Twenty blind writers: each must land, each on its own version.
    moved = race(
        20,
        lambda i: store.jobs.transition(
            record.id, JobState.RUNNING, from_states={JobState.RUNNING}, branch=f"b{i}"
        ),
    )
    versions = sorted(result.version for result in moved if isinstance(result, JobRecord))
    assert versions == list(range(start.version + 1, start.version + 21))

    # Twenty read-modify-write increments with compare-and-set on the version.
    def increment(_: int) -> int:
        while True:
            seen = store.jobs.get(record.id)
            written = store.jobs.transition(
                record.id,
                JobState.RUNNING,
                from_states={JobState.RUNNING},
                expect_version=seen.version,
                attempt=seen.attempt + 1,
            )
            if written is not None:
                return written.version

    committed = race(20, increment)
    assert len(set(committed)) == 20
    final = store.jobs.get(record.id)
    assert final.attempt == start.attempt + 20
    assert final.version == start.version + 40


# cancel ---------------------------------------------------------------------------------


def test_cancel_of_a_queued_job_ends_it_at_once(store: JobStore) -> None:
    record = store.jobs.create(author())
    cancelled = store.jobs.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED and cancelled.cancel_requested
    assert cancelled.error == ErrorInfo(code="BEM-506", message="cancelled while queued")
    assert [event.end for event in store.events.read(record.id)] == [JobState.CANCELLED]
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=30) is None  # the queued task


class RefusedCancel:
    """A cancel policy that refuses every job, and says which it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, record: JobRecord) -> None:
        self.asked.append(record.id)
        raise BeamError("BEM-702", f"not yours to cancel: {record.id}")


def test_a_cancel_its_policy_refuses_changes_nothing(store: JobStore) -> None:
    record = parked(store)
    policy = RefusedCancel()
    assert code_of(lambda: store.jobs.request_cancel(record.id, policy=policy)) == "BEM-702"
    assert policy.asked == [record.id], "asked on the job read in the transaction"
    assert store.jobs.get(record.id) == record
    assert [a.id for a in store.approvals.pending()] == ["ap1"]


def test_cancel_of_a_running_job_asks_its_worker(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    asked = store.jobs.request_cancel(record.id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested
    assert store.jobs.request_cancel(record.id).version == asked.version  # asking twice: no write
    ended = store.jobs.transition(
        record.id, JobState.CANCELLED, from_states={JobState.RUNNING}, owner="w1"
    )
    assert ended is not None and ended.state is JobState.CANCELLED


def test_cancel_of_a_running_job_whose_worker_died_ends_it(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=0.1)
    time.sleep(0.2)
    assert store.jobs.request_cancel(record.id).state is JobState.CANCELLED


def test_cancel_of_a_parked_job_withdraws_its_approval(store: JobStore) -> None:
    record = parked(store)
    assert [a.id for a in store.approvals.pending()] == ["ap1"]
    cancelled = store.jobs.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED
    assert store.approvals.pending() == []
    withdrawn = store.approvals.get(record.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN
    assert [a.state for a in store.approvals.history(record.id)] == [ApprovalState.WITHDRAWN]
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert caught.value.code == "BEM-600" and "withdrawn" in caught.value.message


@pytest.mark.parametrize(
    "final", [JobState.SUCCEEDED, JobState.FAILED, JobState.REFUSED, JobState.CANCELLED]
)
def test_cancel_of_a_final_job_changes_nothing(store: JobStore, final: JobState) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    ended = store.jobs.transition(record.id, final, from_states={JobState.RUNNING})
    assert ended is not None
    assert store.jobs.request_cancel(record.id) == ended
    assert store.jobs.is_final_or_unknown(record.id)


def test_a_job_failing_while_parked_withdraws_its_approval(store: JobStore) -> None:
    record = parked(store)
    store.jobs.transition(record.id, JobState.FAILED, from_states={JobState.AWAITING_APPROVAL})
    assert store.approvals.pending() == []
    withdrawn = store.approvals.get(record.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN


def test_cancel_and_decide_racing_leave_one_consistent_outcome(store: JobStore) -> None:
    for _ in range(10):
        record = parked(store)

        def act(i: int, job_id: str = record.id) -> object:
            if i == 0:
                return store.jobs.request_cancel(job_id)
            return store.approvals.decide(
                job_id, binding=seen(store, job_id), approve=True, by="bob"
            )[0]

        _, decided = race(2, act)
        approval = store.approvals.get(record.id)
        assert approval is not None
        assert store.jobs.get(record.id).state is JobState.CANCELLED
        if isinstance(decided, Approval):
            assert approval.state is ApprovalState.APPROVED
        else:
            assert isinstance(decided, ApprovalError) and decided.code == "BEM-600"
            assert approval.state is ApprovalState.WITHDRAWN
        assert store.approvals.pending() == []
        assert len(store.approvals.history(record.id)) == 1


# pushes upstream --------------------------------------------------------------------------


def test_a_cancel_while_a_push_is_under_way_is_refused_and_the_push_recorded(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    store.jobs.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    with pytest.raises(JobError) as caught:
        store.jobs.request_cancel(record.id)
    assert caught.value.code == "BEM-512" and "under way" in caught.value.message
    under_way = store.jobs.get(record.id)
    assert not under_way.cancel_requested and under_way.push_under_way is not None

    store.jobs.end_push(record.id, worker="w1")
    asked = store.jobs.request_cancel(record.id)
    assert asked.cancel_requested
    [push] = asked.pushes
    assert (push.sha, push.ref, push.state) == ("a" * 40, "riverbeam/x", PushState.LANDED)
    assert push.ended_at is not None and push.ended_at >= push.started_at


def test_a_push_does_not_start_once_a_cancel_was_asked_for_or_the_job_moved_on(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    assert code_of(
        lambda: store.jobs.begin_push(record.id, worker="w2", sha="a" * 40, ref="riverbeam/x")
    ) == ("BEM-507")
    store.jobs.request_cancel(record.id)
    assert code_of(
        lambda: store.jobs.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    ) == ("BEM-506")
    assert store.jobs.get(record.id).pushes == []


def test_a_worker_taking_over_a_job_lost_mid_push_does_not_hold_off_a_cancel(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=0.5)
    store.jobs.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    time.sleep(0.6)  # w1 died mid-push: its lease ran out
    taken = store.jobs.claim(
        record.id, worker="w2", lease_seconds=30, from_states=(JobState.RUNNING,)
    )
    assert taken is not None and taken.push_under_way is None
    assert [p.state for p in taken.pushes] == [PushState.UNKNOWN]
    assert store.jobs.request_cancel(record.id).cancel_requested


def test_a_failed_push_says_why_and_one_cut_short_by_a_lost_worker_is_unknown(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=0.5)
    store.jobs.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    refused = ErrorInfo(code="BEM-351", message="the branch moved")
    store.jobs.end_push(record.id, worker="w1", error=refused)
    store.jobs.begin_push(record.id, worker="w1", sha="b" * 40, ref="riverbeam/x")
    time.sleep(0.6)  # the worker died mid-push: its lease ran out
    cancelled = store.jobs.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED
    assert [(p.state, p.error) for p in cancelled.pushes] == [
        (PushState.FAILED, refused),
        (PushState.UNKNOWN, None),
    ]
