"""JobStore against a real redis-server: documents, compare-and-set under real concurrency,
leases, cancel in every state, approvals, event streams, limits, outages and restarts."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from pydantic import JsonValue

from bot.core.errors import ApprovalError, BeamError, JobError
from bot.core.frames import (
    ChunkFrame,
    ErrorFrame,
    ErrorInfo,
    ThinkingFrame,
    ToolCallRecord,
    ToolFrame,
)
from bot.jobs.store import JobStore
from bot.store.models import (
    Approval,
    ApprovalState,
    AuthorOutcome,
    DecisionBinding,
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
    PushState,
    utcnow,
)
from harness.redis_server import RedisServer, running_redis

T = TypeVar("T")
REDIS_CONF = Path(__file__).resolve().parents[2] / "docker" / "redis.conf"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url)
    yield connection
    connection.close()


def open_store(url: str, **kw: Any) -> JobStore:
    """A store under a prefix of its own, so tests sharing a server never see each other."""
    kw.setdefault("prefix", f"t{uuid.uuid4().hex[:8]}")
    return JobStore.from_url(url, **kw)


@pytest.fixture
def store(server: RedisServer) -> Iterator[JobStore]:
    jobs = open_store(server.url, events_maxlen=50, snapshot_max_bytes=4096)
    yield jobs
    jobs._redis.close()


def author(request: str = "fix the install page", **kw: Any) -> JobSpec:
    kw.setdefault("requested_by", "alice")
    return JobSpec(kind=JobKind.AUTHOR, repo="docs", request=request, **kw)


def pending_for(record: JobRecord, approval_id: str = "ap1") -> Approval:
    return Approval(
        id=approval_id,
        job_id=record.id,
        repo=record.spec.repo,
        requested_by=record.spec.requested_by,
        call_id="call-1",
        tool="git_push",
        arguments={"branch": f"riverbeam/{record.id}"},
        commit_sha="a" * 40,
        target_ref=f"riverbeam/{record.id}",
        diff_digest="d" * 64,
        diff="--- a/install.md\n+++ b/install.md\n",
    )


def seen(store: JobStore, job_id: str) -> DecisionBinding | None:
    """What a reviewer looking at the job's approval now would name in a decision."""
    current = store.approval(job_id)
    return None if current is None else current.binding()


def parked(store: JobStore, spec: JobSpec | None = None, approval_id: str = "ap1") -> JobRecord:
    """A job that ran, opened an approval and parked on it, as the executor does."""
    record = store.create(spec or author())
    assert store.claim(record.id, worker="w1", lease_seconds=30) is not None
    return park_on(store, pending_for(record, approval_id))


def park_on(store: JobStore, approval: Approval) -> JobRecord:
    """The running job opens ``approval`` and parks on it."""
    store.open_approval(approval)
    moved = store.transition(
        approval.job_id,
        JobState.AWAITING_APPROVAL,
        from_states={JobState.RUNNING},
        approval_id=approval.id,
    )
    assert moved is not None
    return moved


def race(count: int, work: Callable[[int], T]) -> list[T | BeamError]:
    """Run ``work(0..count-1)`` on ``count`` threads released together; results in order,
    a BeamError standing for the call that raised it."""
    barrier = threading.Barrier(count)

    def one(index: int) -> T | BeamError:
        barrier.wait()
        try:
            return work(index)
        except BeamError as error:
            return error

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(BeamError) as caught:
        call()
    return caught.value.code


# jobs ----------------------------------------------------------------------------------


def test_create_stores_a_queued_job_that_get_reads_back(store: JobStore) -> None:
    record = store.create(author())
    assert record.state is JobState.QUEUED
    assert record.version == 0 and record.attempt == 0
    assert record.created_at == record.updated_at
    assert store.get(record.id) == record
    assert store.create(author()).id != record.id


def test_unknown_jobs_are_bem_500_everywhere(store: JobStore) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.get("nope"),
        lambda: store.transition("nope", JobState.FAILED, from_states={JobState.QUEUED}),
        lambda: store.claim("nope", worker="w", lease_seconds=1),
        lambda: store.renew_lease("nope", worker="w", lease_seconds=1),
        lambda: store.request_cancel("nope"),
        lambda: store.decide("nope", approve=False, by="bob", binding=None),
    ]
    assert [code_of(call) for call in calls] == ["BEM-500"] * len(calls)
    assert store.is_final_or_unknown("nope")


def test_a_retried_create_with_the_same_key_returns_the_same_job(
    store: JobStore, client: redis.Redis
) -> None:
    first = store.create(author(), idempotency_key="req-1")
    again = store.create(author(), idempotency_key="req-1")
    assert again == first
    assert store.create(author(), idempotency_key="req-2").id != first.id
    assert client.zcard(f"{store._prefix}:jobs") == 2
    ttl = client.ttl(store._idem_key("req-1"))
    assert 23 * 3600 < ttl <= 24 * 3600


def test_an_idempotency_key_reused_for_another_request_is_refused(store: JobStore) -> None:
    store.create(author("one"), idempotency_key="k")
    with pytest.raises(JobError) as caught:
        store.create(author("two"), idempotency_key="k")
    assert caught.value.code == "BEM-501"
    assert "different request" in caught.value.message


def test_concurrent_creates_with_one_key_make_one_job(store: JobStore, client: redis.Redis) -> None:
    results = race(12, lambda _: store.create(author(), idempotency_key="burst"))
    assert all(isinstance(result, JobRecord) for result in results)
    assert len({result.id for result in results if isinstance(result, JobRecord)}) == 1
    assert client.zcard(f"{store._prefix}:jobs") == 1


def test_transition_sets_fields_and_bumps_version_and_updated_at(store: JobStore) -> None:
    record = store.create(author())
    running = store.claim(record.id, worker="w1", lease_seconds=30)
    assert running is not None
    result = JobResult(text="done", outcome=AuthorOutcome(branch="riverbeam/x"))
    done = store.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, result=result
    )
    assert done is not None
    assert done.state is JobState.SUCCEEDED
    assert done.version == running.version + 1
    assert done.updated_at > running.updated_at
    assert done.result == result
    assert done.lease_until is None  # a job that stopped running holds no lease
    assert done.worker == "w1"  # who ran it stays on record
    assert store.get(record.id) == done


def test_transition_is_none_when_the_job_moved_on(store: JobStore) -> None:
    record = store.create(author())
    assert store.transition(record.id, JobState.FAILED, from_states={JobState.RUNNING}) is None
    stale = store.transition(
        record.id, JobState.CANCELLED, from_states={JobState.QUEUED}, expect_version=7
    )
    assert stale is None
    store.claim(record.id, worker="w1", lease_seconds=30)
    not_mine = store.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, owner="w2"
    )
    assert not_mine is None
    assert store.get(record.id).version == 1


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
    record = store.create(author())
    with pytest.raises(ValueError, match="cannot move"):
        store.transition(record.id, to, from_states={from_state})


@pytest.mark.parametrize("field", ["state", "version", "id", "spec", "updated_at", "nonsense"])
def test_transition_refuses_fields_only_the_store_sets(store: JobStore, field: str) -> None:
    record = store.create(author())
    changes: dict[str, Any] = {field: 1}
    with pytest.raises(ValueError, match=field):
        store.transition(record.id, JobState.FAILED, from_states={JobState.QUEUED}, **changes)


def test_concurrent_transitions_never_lose_an_update(store: JobStore) -> None:
    record = store.create(author())
    start = store.claim(record.id, worker="w1", lease_seconds=30)
    assert start is not None
    # Twenty blind writers: each must land, each on its own version.
    moved = race(
        20,
        lambda i: store.transition(
            record.id, JobState.RUNNING, from_states={JobState.RUNNING}, branch=f"b{i}"
        ),
    )
    versions = sorted(result.version for result in moved if isinstance(result, JobRecord))
    assert versions == list(range(start.version + 1, start.version + 21))

    # Twenty read-modify-write increments with compare-and-set on the version.
    def increment(_: int) -> int:
        while True:
            seen = store.get(record.id)
            written = store.transition(
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
    final = store.get(record.id)
    assert final.attempt == start.attempt + 20
    assert final.version == start.version + 40


# claims and leases ---------------------------------------------------------------------


def test_claim_runs_the_job_once_and_a_duplicate_claim_is_a_no_op(store: JobStore) -> None:
    record = store.create(author())
    claimed = store.claim(record.id, worker="w1", lease_seconds=30)
    assert claimed is not None
    assert (claimed.state, claimed.worker, claimed.attempt) == (JobState.RUNNING, "w1", 1)
    assert claimed.lease_until is not None
    assert 29 < (claimed.lease_until - claimed.updated_at).total_seconds() <= 30
    assert store.claim(record.id, worker="w1", lease_seconds=30) is None
    assert store.claim(record.id, worker="w2", lease_seconds=30) is None
    assert store.get(record.id) == claimed


def test_two_workers_claiming_one_job_exactly_one_wins(store: JobStore) -> None:
    for _ in range(10):
        job_id = store.create(author()).id

        def claim(i: int, job_id: str = job_id) -> JobRecord | None:
            return store.claim(job_id, worker=f"w{i}", lease_seconds=30)

        results = race(4, claim)
        winners = [result for result in results if isinstance(result, JobRecord)]
        assert len(winners) == 1 and results.count(None) == 3
        assert store.get(job_id).worker == winners[0].worker


def test_an_expired_lease_is_taken_over_and_the_old_worker_is_locked_out(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=0.2)
    time.sleep(0.3)
    taken = store.claim(record.id, worker="w2", lease_seconds=30)
    assert taken is not None
    assert (taken.worker, taken.attempt) == ("w2", 2)
    assert not store.renew_lease(record.id, worker="w1", lease_seconds=30)
    late = store.transition(
        record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, owner="w1"
    )
    assert late is None


def test_expired_leases_lists_only_running_jobs_whose_worker_stopped_renewing(
    store: JobStore,
) -> None:
    dead, alive, done = (store.create(author()).id for _ in range(3))
    for job_id in (dead, alive, done):
        store.claim(job_id, worker="w1", lease_seconds=0.2)
    store.transition(done, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    waiting = parked(store)
    time.sleep(0.3)
    assert store.renew_lease(alive, worker="w1", lease_seconds=30)
    assert store.expired_leases() == [dead]
    # Taken over: the new lease is live, so the job is off the list.
    assert store.claim(dead, worker="w2", lease_seconds=30) is not None
    assert store.expired_leases() == []
    # A resume holds a lease too; it runs out when its worker dies.
    store.decide(waiting.id, binding=seen(store, waiting.id), approve=True, by="bob")
    assert store.claim_resume(waiting.id, worker="w3", lease_seconds=0.2) is not None
    time.sleep(0.3)
    assert store.expired_leases() == [waiting.id]


def test_renew_lease_extends_only_the_holders_lease(store: JobStore) -> None:
    record = store.create(author())
    claimed = store.claim(record.id, worker="w1", lease_seconds=1)
    assert claimed is not None and claimed.lease_until is not None
    assert store.renew_lease(record.id, worker="w1", lease_seconds=60)
    renewed = store.get(record.id)
    assert renewed.lease_until is not None
    assert renewed.lease_until > claimed.lease_until
    assert renewed.version == claimed.version + 1
    assert not store.renew_lease(record.id, worker="w2", lease_seconds=60)
    store.transition(record.id, JobState.FAILED, from_states={JobState.RUNNING})
    assert not store.renew_lease(record.id, worker="w1", lease_seconds=60)


def test_claim_resumes_a_parked_job_when_asked_to(store: JobStore) -> None:
    record = parked(store)
    assert store.claim(record.id, worker="w2", lease_seconds=30) is None  # queued only
    resumed = store.claim(
        record.id, worker="w2", lease_seconds=30, from_states={JobState.AWAITING_APPROVAL}
    )
    assert resumed is not None and resumed.attempt == 2
    with pytest.raises(ValueError):
        store.claim(record.id, worker="w2", lease_seconds=30, from_states={JobState.FAILED})


def test_claim_resume_waits_for_a_decision_then_applies_it_once(store: JobStore) -> None:
    record = parked(store)
    assert store.claim_resume(record.id, worker="w2", lease_seconds=30) is None
    store.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    claimed = store.claim_resume(record.id, worker="w2", lease_seconds=30)
    assert claimed is not None
    job, approval = claimed
    assert (job.state, job.worker, job.attempt) == (JobState.RUNNING, "w2", 2)
    assert (approval.state, approval.applied) == (ApprovalState.APPROVED, True)
    assert store.approval(record.id) == approval
    assert store.claim_resume(record.id, worker="w3", lease_seconds=30) is None


def test_concurrent_resumes_apply_one_decision_exactly_once(store: JobStore) -> None:
    record = parked(store)
    store.decide(
        record.id, binding=seen(store, record.id), approve=False, by="bob", comment="not this week"
    )

    def resume(i: int) -> tuple[JobRecord, Approval] | None:
        return store.claim_resume(record.id, worker=f"w{i}", lease_seconds=30)

    results = race(10, resume)
    winners = [result for result in results if isinstance(result, tuple)]
    assert len(winners) == 1 and results.count(None) == 9
    assert store.get(record.id).worker == winners[0][0].worker


# cancel ---------------------------------------------------------------------------------


def test_cancel_of_a_queued_job_ends_it_at_once(store: JobStore) -> None:
    record = store.create(author())
    cancelled = store.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED and cancelled.cancel_requested
    assert cancelled.error == ErrorInfo(code="BEM-506", message="cancelled while queued")
    assert [event.end for event in store.read_events(record.id)] == [JobState.CANCELLED]
    assert store.claim(record.id, worker="w1", lease_seconds=30) is None  # the queued task


def test_cancel_of_a_running_job_asks_its_worker(store: JobStore) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    asked = store.request_cancel(record.id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested
    assert store.request_cancel(record.id).version == asked.version  # asking twice: no write
    ended = store.transition(
        record.id, JobState.CANCELLED, from_states={JobState.RUNNING}, owner="w1"
    )
    assert ended is not None and ended.state is JobState.CANCELLED


def test_cancel_of_a_running_job_whose_worker_died_ends_it(store: JobStore) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=0.1)
    time.sleep(0.2)
    assert store.request_cancel(record.id).state is JobState.CANCELLED


def test_cancel_of_a_parked_job_withdraws_its_approval(store: JobStore) -> None:
    record = parked(store)
    assert [a.id for a in store.pending_approvals()] == ["ap1"]
    cancelled = store.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED
    assert store.pending_approvals() == []
    withdrawn = store.approval(record.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN
    assert [a.state for a in store.approval_history(record.id)] == [ApprovalState.WITHDRAWN]
    with pytest.raises(ApprovalError) as caught:
        store.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert caught.value.code == "BEM-600" and "withdrawn" in caught.value.message


@pytest.mark.parametrize(
    "final", [JobState.SUCCEEDED, JobState.FAILED, JobState.REFUSED, JobState.CANCELLED]
)
def test_cancel_of_a_final_job_changes_nothing(store: JobStore, final: JobState) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    ended = store.transition(record.id, final, from_states={JobState.RUNNING})
    assert ended is not None
    assert store.request_cancel(record.id) == ended
    assert store.is_final_or_unknown(record.id)


def test_a_job_failing_while_parked_withdraws_its_approval(store: JobStore) -> None:
    record = parked(store)
    store.transition(record.id, JobState.FAILED, from_states={JobState.AWAITING_APPROVAL})
    assert store.pending_approvals() == []
    withdrawn = store.approval(record.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN


def test_cancel_and_decide_racing_leave_one_consistent_outcome(store: JobStore) -> None:
    for _ in range(10):
        record = parked(store)

        def act(i: int, job_id: str = record.id) -> object:
            if i == 0:
                return store.request_cancel(job_id)
            return store.decide(job_id, binding=seen(store, job_id), approve=True, by="bob")[0]

        _, decided = race(2, act)
        approval = store.approval(record.id)
        assert approval is not None
        assert store.get(record.id).state is JobState.CANCELLED
        if isinstance(decided, Approval):
            assert approval.state is ApprovalState.APPROVED
        else:
            assert isinstance(decided, ApprovalError) and decided.code == "BEM-600"
            assert approval.state is ApprovalState.WITHDRAWN
        assert store.pending_approvals() == []
        assert len(store.approval_history(record.id)) == 1


# run state and snapshots ----------------------------------------------------------------


def test_run_state_and_snapshot_round_trip_and_are_dropped(store: JobStore) -> None:
    record = store.create(author())
    assert code_of(lambda: store.load_run_state(record.id)) == "BEM-502"
    assert store.load_snapshot(record.id) is None
    store.save_run_state(record.id, '{"version": 1}')
    blob = bytes(range(256)) * 16  # exactly the cap, every byte value
    store.save_snapshot(record.id, blob)
    assert store.load_run_state(record.id) == '{"version": 1}'
    assert store.load_snapshot(record.id) == blob
    store.drop_parked(record.id)
    assert store.load_snapshot(record.id) is None
    assert code_of(lambda: store.load_run_state(record.id)) == "BEM-502"


def test_a_snapshot_over_the_cap_is_refused_with_both_sizes(store: JobStore) -> None:
    record = store.create(author())
    with pytest.raises(JobError) as caught:
        store.save_snapshot(record.id, b"x" * 4097)
    assert caught.value.code == "BEM-503"
    assert "4097 bytes" in caught.value.message and "4096 bytes" in caught.value.message
    assert store.load_snapshot(record.id) is None


# events ----------------------------------------------------------------------------------


def test_events_come_back_as_frames_then_the_end(store: JobStore) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    first = store.append_event(record.id, ThinkingFrame(text="reading install.md"))
    store.append_event(record.id, ChunkFrame(text="Fixed two links."))
    store.transition(record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    events = store.read_events(record.id)
    assert [event.frame for event in events[:2]] == [
        ThinkingFrame(text="reading install.md"),
        ChunkFrame(text="Fixed two links."),
    ]
    assert events[0].id == first
    assert (events[2].frame, events[2].end) == (None, JobState.SUCCEEDED)
    assert store.read_events(record.id, after=first) == events[1:]
    assert store.read_events(record.id, after=events[-1].id) == []
    assert len(store.read_events(record.id, count=1)) == 1
    assert store.last_event_id(record.id) == events[-1].id
    assert store.last_event_id("never-ran") == "0-0"


def test_end_events_marks_only_final_states(store: JobStore) -> None:
    record = store.create(author())
    entry = store.end_events(record.id, JobState.FAILED)
    assert store.read_events(record.id)[0].id == entry
    with pytest.raises(ValueError):
        store.end_events(record.id, JobState.RUNNING)


def test_streams_are_capped(store: JobStore, client: redis.Redis) -> None:
    record = store.create(author())
    for index in range(600):
        store.append_event(record.id, ChunkFrame(text=str(index)))
    length = client.xlen(f"{store._prefix}:events:{record.id}")
    # MAXLEN ~ trims whole stream nodes (100 entries each), so it may keep a node more.
    assert 50 <= length <= 150
    events = store.read_events(record.id, count=1000)
    assert len(events) == length
    assert events[-1].frame == ChunkFrame(text="599")


def test_a_blocking_read_wakes_when_an_event_arrives(store: JobStore) -> None:
    record = store.create(author())
    seen = store.append_event(record.id, ChunkFrame(text="before"))
    # Arrives after the first one-second slice of the wait: the read must keep waiting.
    timer = threading.Timer(1.2, store.append_event, (record.id, ChunkFrame(text="later")))
    timer.start()
    started = time.monotonic()
    events = store.read_events(record.id, after=seen, block_ms=5000)
    waited = time.monotonic() - started
    timer.join()
    assert [event.frame for event in events] == [ChunkFrame(text="later")]
    assert 1.1 < waited < 4.5  # past the first slice, and well before the deadline


def test_a_blocking_read_with_nothing_new_returns_empty_in_time(store: JobStore) -> None:
    record = store.create(author())
    store.append_event(record.id, ChunkFrame(text="old"))
    started = time.monotonic()
    assert store.read_events(record.id, after="$", block_ms=300) == []
    assert 0.25 < time.monotonic() - started < 2.5


def test_after_dollar_sees_only_new_events(store: JobStore) -> None:
    record = store.create(author())
    store.append_event(record.id, ChunkFrame(text="old"))
    timer = threading.Timer(0.2, store.append_event, (record.id, ChunkFrame(text="new")))
    timer.start()
    events = store.read_events(record.id, after="$", block_ms=3000)
    timer.join()
    assert [event.frame for event in events] == [ChunkFrame(text="new")]


@pytest.mark.parametrize("after", ["latest", "1-2-3", "", "-1", "١٧٠٠-0", "17\n", "1-٣"])
def test_a_malformed_event_id_is_a_bad_request(store: JobStore, after: str) -> None:
    assert code_of(lambda: store.read_events("any", after=after)) == "BEM-501"


def test_a_damaged_event_is_an_error_frame_in_its_place_and_the_stream_goes_on(
    store: JobStore, client: redis.Redis
) -> None:
    record = store.create(author())
    key = f"{store._prefix}:events:{record.id}"
    store.append_event(record.id, ChunkFrame(text="before"))
    damaged = client.xadd(key, {"frame": '{"type": "tool", "record": '})
    client.xadd(key, {"nothing": "known"})
    store.append_event(record.id, ChunkFrame(text="after"))

    events = store.read_events(record.id)

    assert [type(event.frame).__name__ for event in events] == [
        "ChunkFrame",
        "ErrorFrame",
        "ErrorFrame",
        "ChunkFrame",
    ]
    unreadable = events[1].frame
    assert isinstance(unreadable, ErrorFrame) and unreadable.error.code == "BEM-517"
    assert damaged.decode() in unreadable.error.message
    assert "record" not in unreadable.error.message, "nothing of the entry is shown"


def test_an_event_nested_deeper_than_pydantic_parses_still_reads(
    store: JobStore, client: redis.Redis
) -> None:
    """What the previous release stored for a model's arguments nested ~210 deep."""
    record = store.create(author())
    arguments = _nested(210)
    call = ToolCallRecord(id="c1", name="echo", arguments=arguments, ok=True)
    client.xadd(
        f"{store._prefix}:events:{record.id}", {"frame": ToolFrame(record=call).model_dump_json()}
    )

    [event] = store.read_events(record.id)

    assert isinstance(event.frame, ToolFrame) and event.frame.record.arguments == arguments


# approvals --------------------------------------------------------------------------------


def test_an_approval_is_decided_once_and_kept_in_history(store: JobStore) -> None:
    record = parked(store)
    opened = store.approval(record.id)
    assert opened is not None and opened.state is ApprovalState.PENDING
    decided, _ = store.decide(
        record.id, binding=seen(store, record.id), approve=True, by="bob", comment="looks right"
    )
    assert decided.state is ApprovalState.APPROVED
    assert (decided.decided_by, decided.comment) == ("bob", "looks right")
    assert decided.decided_at is not None
    assert store.approval(record.id) == decided
    assert store.approval_history(record.id) == [decided]
    assert store.pending_approvals() == []
    with pytest.raises(ApprovalError) as caught:
        store.decide(record.id, binding=seen(store, record.id), approve=False, by="carol")
    assert caught.value.code == "BEM-601"
    assert "approved by bob at " in caught.value.message


def test_a_refusal_is_recorded_too(store: JobStore) -> None:
    record = parked(store)
    refused, _ = store.decide(
        record.id, binding=seen(store, record.id), approve=False, by="bob", comment="wrong page"
    )
    assert refused.state is ApprovalState.REFUSED
    claimed = store.claim_resume(record.id, worker="w2", lease_seconds=30)
    assert claimed is not None and claimed[1] == refused.model_copy(update={"applied": True})


def test_no_approval_waiting_is_bem_600(store: JobStore) -> None:
    record = store.create(author())
    assert code_of(lambda: store.decide(record.id, binding=None, approve=False, by="bob")) == (
        "BEM-600"
    )
    # Opened but not parked yet (the worker is between the two writes): not decidable.
    store.claim(record.id, worker="w1", lease_seconds=30)
    store.open_approval(pending_for(record))
    with pytest.raises(ApprovalError) as caught:
        store.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert caught.value.code == "BEM-600" and "running" in caught.value.message


def test_the_requester_cannot_approve_their_own_job_unless_allowed(store: JobStore) -> None:
    record = parked(store)

    def allow(job: JobRecord) -> bool:
        return job.id == record.id

    with pytest.raises(ApprovalError) as caught:
        store.decide(record.id, binding=seen(store, record.id), approve=True, by="alice")
    assert caught.value.code == "BEM-602"
    allowed, read = store.decide(
        record.id, binding=seen(store, record.id), approve=True, by="alice", authorize=allow
    )
    assert allowed.decided_by == "alice" and read == store.get(record.id)
    other = parked(store)
    assert (
        store.decide(other.id, binding=seen(store, other.id), approve=False, by="alice")[0].state
        is ApprovalState.REFUSED
    )


def test_concurrent_decisions_exactly_one_lands(store: JobStore) -> None:
    record = parked(store)
    results = race(
        10,
        lambda i: store.decide(
            record.id, binding=seen(store, record.id), approve=i % 2 == 0, by=f"r{i}"
        )[0],
    )
    landed = [result for result in results if isinstance(result, Approval)]
    assert len(landed) == 1
    assert all(
        isinstance(r, ApprovalError) and r.code == "BEM-601" for r in results if r not in landed
    )
    assert store.approval(record.id) == landed[0]
    assert store.approval_history(record.id) == landed


def test_pending_approvals_are_oldest_first_and_filter_by_repo(store: JobStore) -> None:
    first = parked(store, author())
    second = parked(store, JobSpec(kind=JobKind.REVIEW, repo="api", branch="b"))
    third = parked(store, author())
    assert [a.job_id for a in store.pending_approvals()] == [first.id, second.id, third.id]
    assert [a.job_id for a in store.pending_approvals(repo="api")] == [second.id]
    assert store.pending_approvals(repo="elsewhere") == []


def _summarized(store: JobStore, **kw: Any) -> tuple[int, list[tuple[str, str]]]:
    count, summaries = store.pending_summaries(limit=100, **kw)
    return count, [(summary.job_id, summary.repo) for summary in summaries]


def test_pending_summaries_follow_open_decide_and_withdraw_without_reading_a_diff(
    store: JobStore,
) -> None:
    first = parked(store, author())
    second = parked(store, JobSpec(kind=JobKind.REVIEW, repo="api", branch="b"))
    third = parked(store, author())
    # A summary is read, never the approval: its document gone, it is still counted.
    store._redis.delete(store._approval_key(first.id))
    assert _summarized(store) == (3, [(first.id, "docs"), (second.id, "api"), (third.id, "docs")])
    count, capped = store.pending_summaries(limit=1)
    assert (count, [summary.job_id for summary in capped]) == (3, [first.id])

    store.decide(second.id, binding=seen(store, second.id), approve=True, by="bob")
    store.request_cancel(third.id)
    assert _summarized(store) == (1, [(first.id, "docs")])
    assert store._redis.hlen(store._summaries_key) == 1


def test_an_approval_parked_by_the_previous_release_is_summarized_on_first_read(
    store: JobStore,
) -> None:
    """The previous release kept the approval and its place in the pending queue, no
    summary: the first read writes it from the full document, then reads only the summary."""
    old = [parked(store, author()) for _ in range(3)]
    store._redis.delete(store._summaries_key)

    assert _summarized(store, migrate=2) == (3, [(old[0].id, "docs"), (old[1].id, "docs")])
    assert _summarized(store, migrate=2) == (3, [(job.id, "docs") for job in old])
    assert store._redis.hlen(store._summaries_key) == 3
    for job in old:
        store._redis.delete(store._approval_key(job.id))  # from now on, summaries only
    assert _summarized(store, migrate=0) == (3, [(job.id, "docs") for job in old])


def test_a_decision_recorded_before_the_resume_index_is_indexed_by_the_sweeps(
    server: RedisServer,
) -> None:
    """The previous release recorded decisions without indexing them: the sweeps index them
    a page at a time, and a glob character in the prefix matches only itself."""
    store = open_store(server.url, prefix=f"t{uuid.uuid4().hex[:8]}[x]")
    lost = parked(store)
    store.decide(lost.id, binding=seen(store, lost.id), approve=True, by="bob")
    applied = parked(store)
    store.decide(applied.id, binding=None, approve=False, by="bob")
    store.claim_resume(applied.id, worker="w1", lease_seconds=30)
    store._redis.delete(store._decided_key)  # as the previous release left it
    marker = store.key("approvals", "decided", "backfill")

    for _ in range(10_000):  # one SCAN page per sweep, over the whole shared server
        found = store.unapplied_decisions(older_than=0)
        if store._redis.get(marker) == b"done":
            break
    assert [job.id for job in found] == [lost.id]
    assert [job.id for job in store.unapplied_decisions(older_than=0)] == [lost.id]


def test_a_decision_stays_in_the_resume_index_until_a_resume_claims_it(store: JobStore) -> None:
    record = parked(store)
    store.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert store.unapplied_decisions(older_than=3600) == []  # too recent to be overdue
    assert [job.id for job in store.unapplied_decisions(older_than=0)] == [record.id]
    assert [job.id for job in store.unapplied_decisions(older_than=0)] == [record.id]

    assert store.claim_resume(record.id, worker="w1", lease_seconds=30) is not None
    assert store.unapplied_decisions(older_than=0) == []
    assert store._redis.zcard(store._decided_key) == 0


def test_opening_an_approval_again_is_idempotent_and_a_new_one_replaces_it(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    first = store.open_approval(pending_for(record, "ap1"))
    assert store.open_approval(pending_for(record, "ap1")) == first  # a redelivered park
    second = store.open_approval(pending_for(record, "ap2"))
    assert store.approval(record.id) == second
    assert [a.id for a in store.pending_approvals()] == ["ap2"]
    with pytest.raises(ValueError):
        store.open_approval(second.model_copy(update={"state": ApprovalState.APPROVED}))
    orphan = pending_for(record).model_copy(update={"job_id": "nope"})
    assert code_of(lambda: store.open_approval(orphan)) == "BEM-500"


# listing -----------------------------------------------------------------------------------


def _every_page(store: JobStore, *, limit: int) -> list[str]:
    """The ids of every job, page after page, following the cursors to the end."""
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = store.list(limit=limit, cursor=cursor)
        seen += [job.id for job in page]
        if cursor is None:
            return seen


def test_list_is_newest_first_filters_and_pages(store: JobStore) -> None:
    made = [
        store.create(author(requested_by="alice")),
        store.create(JobSpec(kind=JobKind.REVIEW, repo="docs", branch="b", requested_by="bob")),
        store.create(author(requested_by="bob")),
        store.create(JobSpec(kind=JobKind.SUMMARIZE, repo="api", branch="main")),
        store.create(author(requested_by="alice")),
    ]
    store.claim(made[2].id, worker="w1", lease_seconds=30)
    newest_first = [record.id for record in reversed(made)]
    jobs, cursor = store.list()
    assert [job.id for job in jobs] == newest_first and cursor is None

    assert _every_page(store, limit=2) == newest_first

    def ids(**filters: Any) -> list[str]:
        return [job.id for job in store.list(**filters)[0]]

    assert ids(state=JobState.RUNNING) == [made[2].id]
    assert ids(kind=JobKind.AUTHOR) == [made[4].id, made[2].id, made[0].id]
    assert ids(repo="api") == [made[3].id]
    assert ids(requested_by="bob", kind=JobKind.AUTHOR) == [made[2].id]
    assert ids(state=JobState.FAILED) == []


def test_list_pages_through_jobs_created_in_the_same_instant(
    store: JobStore, client: redis.Redis
) -> None:
    made = [store.create(author()) for _ in range(7)]
    # Force ties on the creation score: the cursor must still neither skip nor repeat.
    client.zadd(f"{store._prefix}:jobs", {record.id: 1_700_000_000.5 for record in made})
    assert _every_page(store, limit=3) == sorted((record.id for record in made), reverse=True)


# The last three: NaN and infinite scores, which Redis would refuse mid-query.
@pytest.mark.parametrize(
    "cursor",
    ["garbage", "W10", "WyIxIiwgMV0", "WyJuYW4iLCAieCJd", "WyJpbmYiLCAieCJd", "WyItaW5mIiwgIngiXQ"],
)
def test_a_forged_cursor_is_a_bad_request(store: JobStore, cursor: str) -> None:
    assert code_of(lambda: store.list(cursor=cursor)) == "BEM-501"


def test_a_nested_or_overlong_cursor_is_a_bad_request(store: JobStore) -> None:
    nested = base64.urlsafe_b64encode(b"[" * 290 + b"]" * 290).decode()
    assert code_of(lambda: store.list(cursor=nested)) == "BEM-501"
    deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    assert code_of(lambda: store.list(cursor=deep)) == "BEM-501"


def _nested(depth: int) -> JsonValue:
    value: JsonValue = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _legacy_record(store: JobStore, client: redis.Redis, depth: int) -> JobRecord:
    """A job whose metadata nests ``depth`` deep, stored as the previous release stored it."""
    spec = author(metadata={"x": _nested(depth)})
    record = JobRecord(
        id=uuid.uuid4().hex[:12], spec=spec, created_at=utcnow(), updated_at=utcnow()
    )
    client.set(f"{store._prefix}:job:{record.id}", record.model_dump_json())
    client.zadd(f"{store._prefix}:jobs", {record.id: record.created_at.timestamp()})
    return record


def test_a_record_nested_deeper_than_pydantic_parses_still_reads_lists_and_cancels(
    store: JobStore, client: redis.Redis
) -> None:
    plain = store.create(author())
    legacy = _legacy_record(store, client, 250)

    assert store.get(legacy.id) == legacy
    assert [record.id for record in store.list()[0]] == [legacy.id, plain.id]
    assert store.request_cancel(legacy.id).state is JobState.CANCELLED
    assert store.get(legacy.id).spec.metadata == legacy.spec.metadata


def test_a_damaged_record_is_skipped_and_named_and_reading_it_is_bem_516(
    store: JobStore, client: redis.Redis
) -> None:
    older = store.create(author())
    damaged = store.create(author(request="secret words"))
    newer = store.create(author())
    client.set(
        f"{store._prefix}:job:{damaged.id}", b'{"id": "x", "spec": {"request": "secret words"'
    )

    page = store.listing()
    assert [record.id for record in page.records] == [newer.id, older.id]
    assert page.unreadable == [damaged.id]
    first = store.listing(limit=2)
    assert ([r.id for r in first.records], first.unreadable) == ([newer.id], [damaged.id])
    second = store.listing(limit=2, cursor=first.next_cursor)
    assert [record.id for record in second.records] == [older.id], "the cursor passes it"
    with pytest.raises(JobError) as caught:
        store.get(damaged.id)
    assert caught.value.code == "BEM-516" and "secret" not in caught.value.message
    assert code_of(lambda: store.request_cancel(damaged.id)) == "BEM-516"


def test_a_damaged_approval_is_left_out_of_the_queue_and_the_history(
    store: JobStore, client: redis.Redis
) -> None:
    good, bad = parked(store), parked(store)
    client.set(f"{store._prefix}:approval:{bad.id}", b"{not json")
    client.rpush(f"{store._prefix}:approvals:history:{good.id}", b"[[[")

    assert [approval.job_id for approval in store.pending_approvals()] == [good.id]
    assert store.approval_history(good.id) == []


def test_listing_ten_thousand_jobs_reads_only_what_a_page_needs(
    store: JobStore, client: redis.Redis
) -> None:
    specs = [author(), JobSpec(kind=JobKind.REVIEW, repo="rare", branch="b")]
    with client.pipeline(transaction=False) as pipe:
        for index in range(10_000):
            record = JobRecord(id=f"j{index:05d}", spec=specs[index % 100 == 0])
            pipe.set(store._job_key(record.id), record.model_dump_json())
            pipe.zadd(store._jobs_key, {record.id: 1_700_000_000 + index})
        pipe.execute()

    def calls(command: str) -> int:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {})
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0

    client.config_resetstat()
    page, cursor = store.list(limit=20)
    assert [job.id for job in page] == [f"j{i:05d}" for i in range(9999, 9979, -1)]
    assert cursor is not None
    assert (calls("zrevrangebyscore"), calls("mget")) == (1, 1)

    client.config_resetstat()
    rare, cursor = store.list(repo="rare", limit=5)
    assert [job.id for job in rare] == [f"j{i:05d}" for i in range(9900, 9499, -100)]
    assert calls("mget") <= 3  # a few wide pages, not ten thousand reads

    more, _ = store.list(repo="rare", limit=5, cursor=cursor)
    assert [job.id for job in more] == [f"j{i:05d}" for i in range(9400, 8999, -100)]


def test_list_limits_are_checked(store: JobStore) -> None:
    for limit in (0, 1001):
        with pytest.raises(ValueError):
            store.list(limit=limit)


# schedule locks ----------------------------------------------------------------------------


def test_a_schedule_lock_is_held_once_and_released_only_by_its_token(store: JobStore) -> None:
    token = store.try_lock("docs", ttl_seconds=30)
    assert token is not None
    assert store.try_lock("docs", ttl_seconds=30) is None
    store.unlock("docs", "not-the-token")
    assert store.try_lock("docs", ttl_seconds=30) is None
    store.unlock("docs", token)
    assert store.try_lock("docs", ttl_seconds=30) is not None


def test_a_schedule_lock_expires(store: JobStore) -> None:
    first = store.try_lock("api", ttl_seconds=0.1)
    assert first is not None
    time.sleep(0.2)
    second = store.try_lock("api", ttl_seconds=30)
    assert second is not None
    store.unlock("api", first)  # the expired holder cannot release the new one
    assert store.try_lock("api", ttl_seconds=30) is None


# the client, outages and restarts ----------------------------------------------------------


def test_a_decoding_client_is_refused(server: RedisServer) -> None:
    decoding = redis.Redis.from_url(server.url, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses"):
        JobStore(decoding)
    decoding.close()


def test_redis_going_away_is_bem_504_without_secrets_and_recovers(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=True) as server:
        plain = open_store(server.url)
        record = plain.create(author())
        admin = redis.Redis.from_url(server.url)
        admin.config_set("requirepass", "s3cret-pw")
        admin.close()
        secret_url = server.url.replace("redis://", "redis://:s3cret-pw@")
        guarded = open_store(secret_url, prefix=plain._prefix)
        assert guarded.get(record.id) == record
        wrong = open_store(server.url.replace("redis://", "redis://:wrong-pw@"))
        with pytest.raises(JobError) as refused:
            wrong.get(record.id)
        assert refused.value.code == "BEM-504"
        assert "authentication failed" in refused.value.message

        server.stop()
        calls: list[Callable[[], object]] = [
            lambda: guarded.get(record.id),
            lambda: guarded.create(author()),
            lambda: guarded.claim(record.id, worker="w", lease_seconds=1),
            lambda: guarded.read_events(record.id, block_ms=100),
            lambda: guarded.append_event(record.id, ChunkFrame(text="x")),
            lambda: guarded.pending_approvals(),
            lambda: guarded.list(),
        ]
        for call in calls:
            with pytest.raises(JobError) as caught:
                call()
            assert caught.value.code == "BEM-504"
            assert "s3cret" not in str(caught.value) and "pw" not in str(caught.value)
            assert f"127.0.0.1:{server.port}" in caught.value.message

        server.start()  # the password was runtime-only: the restarted server has none
        assert plain.get(record.id).state is JobState.QUEUED  # the client reconnects
        for store in (plain, guarded, wrong):
            store._redis.close()


def fill(store: JobStore) -> dict[str, Any]:
    """One of everything the store keeps, for a restart to bring back."""
    queued = store.create(author("queued"), idempotency_key="retry-me")
    running = store.create(author("running"))
    store.claim(running.id, worker="w1", lease_seconds=600)
    waiting = parked(store)
    store.save_run_state(waiting.id, '{"version": 1, "pending": "call-1"}')
    store.save_snapshot(waiting.id, b"\x00bundle\xff" * 100)
    decided = parked(store, approval_id="ap9")
    store.decide(
        decided.id, binding=seen(store, decided.id), approve=True, by="bob", comment="ship it"
    )
    store.append_event(running.id, ThinkingFrame(text="thinking"))
    store.transition(running.id, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    token = store.try_lock("docs", ttl_seconds=600)
    return {
        "jobs": store.list()[0],
        "idempotent": queued.id,
        "events": store.read_events(running.id),
        "pending": store.pending_approvals(),
        "decided": (store.approval(decided.id), store.approval_history(decided.id)),
        "parked": (store.load_run_state(waiting.id), store.load_snapshot(waiting.id)),
        "waiting": waiting.id,
        "decided_id": decided.id,
        "running": running.id,
        "token": token,
    }


def test_a_redis_restart_with_aof_keeps_everything(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=True) as server:
        store = open_store(server.url)
        before = fill(store)
        server.crash()  # SIGKILL, no shutdown save: only the append-only file remains
        server.start()
        assert store.list()[0] == before["jobs"]
        assert store.create(author("queued"), idempotency_key="retry-me").id == before["idempotent"]
        assert store.read_events(before["running"]) == before["events"]
        assert store.pending_approvals() == before["pending"]
        decided_id = before["decided_id"]
        assert (store.approval(decided_id), store.approval_history(decided_id)) == before["decided"]
        assert (
            store.load_run_state(before["waiting"]),
            store.load_snapshot(before["waiting"]),
        ) == before["parked"]
        assert store.try_lock("docs", ttl_seconds=1) is None
        # ...and it goes on: the decided approval is applied once, after the restart too.
        assert store.claim_resume(decided_id, worker="w9", lease_seconds=30) is not None
        assert store.claim_resume(decided_id, worker="w9", lease_seconds=30) is None
        store._redis.close()


def test_a_redis_restart_without_persistence_loses_the_jobs(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=False) as server:
        store = open_store(server.url)
        record = store.create(author())
        server.crash()
        server.start()
        assert code_of(lambda: store.get(record.id)) == "BEM-500"
        assert store.list() == ([], None)
        store._redis.close()


def test_the_shipped_redis_conf_persists_and_never_evicts(tmp_path: Path) -> None:
    with running_redis(tmp_path, config=REDIS_CONF) as server:
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        settings = {
            name: admin.config_get(name)[name]
            for name in ("appendonly", "appendfsync", "maxmemory-policy", "save")
        }
        admin.close()
        assert settings == {
            "appendonly": "yes",
            "appendfsync": "everysec",
            "maxmemory-policy": "noeviction",
            "save": "3600 1 300 100 60 10000",
        }
        store = open_store(server.url)
        before = fill(store)
        server.crash()
        server.start()
        assert store.list()[0] == before["jobs"]
        assert store.read_events(before["running"]) == before["events"]
        store._redis.close()


# decisions name what they decide ---------------------------------------------------------


def park_again(store: JobStore, record: JobRecord, approval_id: str, commit: str) -> None:
    """The resume applied the decision; the agent committed something else and parked on it."""
    assert store.claim_resume(record.id, worker="w2", lease_seconds=30) is not None
    again = pending_for(record, approval_id).model_copy(
        update={"commit_sha": commit, "diff_digest": "e" * 64, "diff": "+++ another change\n"}
    )
    park_on(store, again)


def test_an_approve_of_what_was_shown_before_the_job_parked_again_is_refused(
    store: JobStore,
) -> None:
    """Reviewer A opens approval 1; B refuses it; the job parks approval 2 on another commit;
    A's approve still names approval 1, so it lands on nothing."""
    record = parked(store, approval_id="ap1")
    shown_to_a = seen(store, record.id)
    store.decide(record.id, binding=seen(store, record.id), approve=False, by="b", comment="no")
    park_again(store, record, "ap2", "b" * 40)

    for approve in (True, False):
        with pytest.raises(ApprovalError) as caught:
            store.decide(record.id, binding=shown_to_a, approve=approve, by="a")
        assert caught.value.code == "BEM-604"
        assert "ap2 (pending)" in caught.value.message and "look at" in caught.value.message
    waiting = store.approval(record.id)
    assert waiting is not None and waiting.id == "ap2" and waiting.state is ApprovalState.PENDING
    assert [a.id for a in store.approval_history(record.id)] == ["ap1"]
    assert [a.id for a in store.pending_approvals()] == ["ap2"]


def test_a_decision_naming_the_waiting_approval_with_another_commit_or_digest_is_refused(
    store: JobStore,
) -> None:
    record = parked(store)
    shown = seen(store, record.id)
    assert shown is not None
    for wrong in (
        shown.model_copy(update={"commit_sha": "b" * 40}),
        shown.model_copy(update={"commit_sha": None}),
        shown.model_copy(update={"diff_digest": "e" * 64}),
        shown.model_copy(update={"diff_digest": ""}),
    ):
        with pytest.raises(ApprovalError) as caught:
            store.decide(record.id, binding=wrong, approve=True, by="bob")
        assert caught.value.code == "BEM-604"
    # As the CLI and the web page show them: the digest with its prefix, any case.
    typed = DecisionBinding(
        approval_id="ap1", commit_sha=("A" * 40), diff_digest="SHA256:" + "D" * 64
    )
    assert store.decide(record.id, binding=typed, approve=True, by="bob")[0].state is (
        ApprovalState.APPROVED
    )


def test_an_approve_must_name_what_it_approves_and_a_refuse_need_not(store: JobStore) -> None:
    record = parked(store)
    with pytest.raises(ApprovalError) as caught:
        store.decide(record.id, binding=None, approve=True, by="bob")
    assert caught.value.code == "BEM-605"
    untouched = store.approval(record.id)
    assert untouched is not None and untouched.state is ApprovalState.PENDING
    refused, _ = store.decide(record.id, binding=None, approve=False, by="bob", comment="no")
    assert refused.state is ApprovalState.REFUSED


def test_an_approval_and_job_stored_by_the_previous_release_are_decided_and_resumed(
    store: JobStore, client: redis.Redis
) -> None:
    """Records exactly as the previous release wrote them (no OS account, no pushes): the
    binding is what their approval document shows, and the decision applies."""
    job_id = "0123456789ab"
    sha, digest = "c" * 40, "f" * 64
    job = {
        "id": job_id,
        "spec": {
            "kind": "author",
            "repo": "docs",
            "request": "fix the install page",
            "base": None,
            "branch": None,
            "range": None,
            "review_job": None,
            "pages": [],
            "requested_by": "alice",
            "metadata": {},
        },
        "state": "awaiting_approval",
        "version": 3,
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": "2026-11-30T10:01:00Z",
        "attempt": 1,
        "worker": None,
        "lease_until": None,
        "branch": f"riverbeam/{job_id}",
        "approval_id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
        "cancel_requested": False,
        "result": None,
        "error": None,
    }
    approval = {
        "id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
        "job_id": job_id,
        "repo": "docs",
        "requested_by": "alice",
        "call_id": "call-1",
        "tool": "git_push",
        "arguments": {},
        "commit_sha": sha,
        "target_ref": f"riverbeam/{job_id}",
        "base_sha": "b" * 40,
        "diff_digest": digest,
        "diff_stat": " install.md | 2 +-\n",
        "diff": "--- a/install.md\n+++ b/install.md\n",
        "created_at": "2026-11-30T10:01:00Z",
        "state": "pending",
        "decided_by": None,
        "decided_at": None,
        "comment": "",
        "applied": False,
    }
    client.set(store.key("job", job_id), json.dumps(job))
    client.zadd(store.key("jobs"), {job_id: 1_700_000_000.0})
    client.set(store.key("approval", job_id), json.dumps(approval))
    client.zadd(store.key("approvals", "pending"), {job_id: 1_700_000_000.0})

    shown = DecisionBinding(approval_id=approval["id"], commit_sha=sha, diff_digest=digest)
    stored = store.approval(job_id)
    assert stored is not None and stored.binding() == shown
    assert store.get(job_id).pushes == []
    decided, _ = store.decide(job_id, binding=shown, approve=True, by="bob")
    assert decided.state is ApprovalState.APPROVED and decided.decided_by_os_user is None
    claimed = store.claim_resume(job_id, worker="w1", lease_seconds=30)
    assert claimed is not None and claimed[1].applied


def test_a_cli_decision_records_the_os_account_and_it_too_may_not_approve_its_own_job(
    store: JobStore,
) -> None:
    record = parked(store)  # requested by alice
    with pytest.raises(ApprovalError) as caught:
        store.decide(
            record.id, binding=seen(store, record.id), approve=True, by="bob", os_user="alice"
        )
    assert caught.value.code == "BEM-602"
    decided, _ = store.decide(
        record.id, binding=seen(store, record.id), approve=True, by="bob", os_user="carol"
    )
    assert (decided.decided_by, decided.decided_by_os_user) == ("bob", "carol")
    assert decided.decider == "bob (OS user carol)"
    assert store.approval_history(record.id)[0].decided_by_os_user == "carol"


# pushes upstream --------------------------------------------------------------------------


def test_a_cancel_while_a_push_is_under_way_is_refused_and_the_push_recorded(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    store.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    with pytest.raises(JobError) as caught:
        store.request_cancel(record.id)
    assert caught.value.code == "BEM-512" and "under way" in caught.value.message
    under_way = store.get(record.id)
    assert not under_way.cancel_requested and under_way.push_under_way is not None

    store.end_push(record.id, worker="w1")
    asked = store.request_cancel(record.id)
    assert asked.cancel_requested
    [push] = asked.pushes
    assert (push.sha, push.ref, push.state) == ("a" * 40, "riverbeam/x", PushState.LANDED)
    assert push.ended_at is not None and push.ended_at >= push.started_at


def test_a_push_does_not_start_once_a_cancel_was_asked_for_or_the_job_moved_on(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=30)
    assert code_of(
        lambda: store.begin_push(record.id, worker="w2", sha="a" * 40, ref="riverbeam/x")
    ) == ("BEM-507")
    store.request_cancel(record.id)
    assert code_of(
        lambda: store.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    ) == ("BEM-506")
    assert store.get(record.id).pushes == []


def test_a_worker_taking_over_a_job_lost_mid_push_does_not_hold_off_a_cancel(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=0.5)
    store.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    time.sleep(0.6)  # w1 died mid-push: its lease ran out
    taken = store.claim(record.id, worker="w2", lease_seconds=30, from_states=(JobState.RUNNING,))
    assert taken is not None and taken.push_under_way is None
    assert [p.state for p in taken.pushes] == [PushState.UNKNOWN]
    assert store.request_cancel(record.id).cancel_requested


def test_a_failed_push_says_why_and_one_cut_short_by_a_lost_worker_is_unknown(
    store: JobStore,
) -> None:
    record = store.create(author())
    store.claim(record.id, worker="w1", lease_seconds=0.5)
    store.begin_push(record.id, worker="w1", sha="a" * 40, ref="riverbeam/x")
    refused = ErrorInfo(code="BEM-351", message="the branch moved")
    store.end_push(record.id, worker="w1", error=refused)
    store.begin_push(record.id, worker="w1", sha="b" * 40, ref="riverbeam/x")
    time.sleep(0.6)  # the worker died mid-push: its lease ran out
    cancelled = store.request_cancel(record.id)
    assert cancelled.state is JobState.CANCELLED
    assert [(p.state, p.error) for p in cancelled.pushes] == [
        (PushState.FAILED, refused),
        (PushState.UNKNOWN, None),
    ]
