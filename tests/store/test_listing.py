"""The jobs list: newest first, filtered, paged by an opaque cursor; damaged or deeply
nested records."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
import redis

from bot.core.errors import JobError
from bot.store.models import JobKind, JobRecord, JobSpec, JobState, utcnow
from bot.store.store import JobStore
from tests.store.kit import author, code_of, nested, parked


def _every_page(store: JobStore, *, limit: int) -> list[str]:
    """The ids of every job, page after page, following the cursors to the end."""
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = store.listing.list(limit=limit, cursor=cursor)
        seen += [job.id for job in page]
        if cursor is None:
            return seen


def test_list_is_newest_first_filters_and_pages(store: JobStore) -> None:
    made = [
        store.jobs.create(author(requested_by="alice")),
        store.jobs.create(
            JobSpec(kind=JobKind.REVIEW, repo="docs", branch="b", requested_by="bob")
        ),
        store.jobs.create(author(requested_by="bob")),
        store.jobs.create(JobSpec(kind=JobKind.SUMMARIZE, repo="api", branch="main")),
        store.jobs.create(author(requested_by="alice")),
    ]
    store.jobs.claim(made[2].id, worker="w1", lease_seconds=30)
    newest_first = [record.id for record in reversed(made)]
    jobs, cursor = store.listing.list()
    assert [job.id for job in jobs] == newest_first and cursor is None

    assert _every_page(store, limit=2) == newest_first

    def ids(**filters: Any) -> list[str]:
        return [job.id for job in store.listing.list(**filters)[0]]

    assert ids(state=JobState.RUNNING) == [made[2].id]
    assert ids(kind=JobKind.AUTHOR) == [made[4].id, made[2].id, made[0].id]
    assert ids(repo="api") == [made[3].id]
    assert ids(requested_by="bob", kind=JobKind.AUTHOR) == [made[2].id]
    assert ids(state=JobState.FAILED) == []


def test_list_pages_through_jobs_created_in_the_same_instant(
    store: JobStore, client: redis.Redis
) -> None:
    made = [store.jobs.create(author()) for _ in range(7)]
    # Force ties on the creation score: the cursor must still neither skip nor repeat.
    client.zadd(store.gateway.keys.jobs, {record.id: 1_700_000_000.5 for record in made})
    assert _every_page(store, limit=3) == sorted((record.id for record in made), reverse=True)


# The last three: NaN and infinite scores, which Redis would refuse mid-query.
@pytest.mark.parametrize(
    "cursor",
    ["garbage", "W10", "WyIxIiwgMV0", "WyJuYW4iLCAieCJd", "WyJpbmYiLCAieCJd", "WyItaW5mIiwgIngiXQ"],
)
def test_a_forged_cursor_is_a_bad_request(store: JobStore, cursor: str) -> None:
    assert code_of(lambda: store.listing.list(cursor=cursor)) == "BEM-501"


def test_a_nested_or_overlong_cursor_is_a_bad_request(store: JobStore) -> None:
    nested = base64.urlsafe_b64encode(b"[" * 290 + b"]" * 290).decode()
    assert code_of(lambda: store.listing.list(cursor=nested)) == "BEM-501"
    deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    assert code_of(lambda: store.listing.list(cursor=deep)) == "BEM-501"


def _legacy_record(store: JobStore, client: redis.Redis, depth: int) -> JobRecord:
    """A job whose metadata nests ``depth`` deep, stored as the previous release stored it."""
    spec = author(metadata={"x": nested(depth)})
    record = JobRecord(
        id=uuid.uuid4().hex[:12], spec=spec, created_at=utcnow(), updated_at=utcnow()
    )
    client.set(store.gateway.keys.job(record.id), record.model_dump_json())
    client.zadd(store.gateway.keys.jobs, {record.id: record.created_at.timestamp()})
    return record


def test_a_record_nested_deeper_than_pydantic_parses_still_reads_lists_and_cancels(
    store: JobStore, client: redis.Redis
) -> None:
    plain = store.jobs.create(author())
    legacy = _legacy_record(store, client, 250)

    assert store.jobs.get(legacy.id) == legacy
    assert [record.id for record in store.listing.list()[0]] == [legacy.id, plain.id]
    assert store.jobs.request_cancel(legacy.id).state is JobState.CANCELLED
    assert store.jobs.get(legacy.id).spec.metadata == legacy.spec.metadata


def test_a_damaged_record_is_skipped_and_named_and_reading_it_is_bem_516(
    store: JobStore, client: redis.Redis
) -> None:
    older = store.jobs.create(author())
    damaged = store.jobs.create(author(request="secret words"))
    newer = store.jobs.create(author())
    client.set(
        f"{store.gateway.keys.prefix}:job:{damaged.id}",
        b'{"id": "x", "spec": {"request": "secret words"',
    )

    page = store.listing.page()
    assert [record.id for record in page.records] == [newer.id, older.id]
    assert page.unreadable == [damaged.id]
    first = store.listing.page(limit=2)
    assert ([r.id for r in first.records], first.unreadable) == ([newer.id], [damaged.id])
    second = store.listing.page(limit=2, cursor=first.next_cursor)
    assert [record.id for record in second.records] == [older.id], "the cursor passes it"
    with pytest.raises(JobError) as caught:
        store.jobs.get(damaged.id)
    assert caught.value.code == "BEM-516" and "secret" not in caught.value.message
    assert code_of(lambda: store.jobs.request_cancel(damaged.id)) == "BEM-516"


def test_a_damaged_approval_is_left_out_of_the_queue_and_the_history(
    store: JobStore, client: redis.Redis
) -> None:
    good, bad = parked(store), parked(store)
    client.set(f"{store.gateway.keys.prefix}:approval:{bad.id}", b"{not json")
    client.rpush(f"{store.gateway.keys.prefix}:approvals:history:{good.id}", b"[[[")

    assert [approval.job_id for approval in store.approvals.pending()] == [good.id]
    assert store.approvals.history(good.id) == []


def test_listing_ten_thousand_jobs_reads_only_what_a_page_needs(
    store: JobStore, client: redis.Redis
) -> None:
    specs = [author(), JobSpec(kind=JobKind.REVIEW, repo="rare", branch="b")]
    with client.pipeline(transaction=False) as pipe:
        for index in range(10_000):
            record = JobRecord(id=f"j{index:05d}", spec=specs[index % 100 == 0])
            pipe.set(store.gateway.keys.job(record.id), record.model_dump_json())
            pipe.zadd(store.gateway.keys.jobs, {record.id: 1_700_000_000 + index})
        pipe.execute()

    def calls(command: str) -> int:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {})
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0

    client.config_resetstat()
    page, cursor = store.listing.list(limit=20)
    assert [job.id for job in page] == [f"j{i:05d}" for i in range(9999, 9979, -1)]
    assert cursor is not None
    assert (calls("zrevrangebyscore"), calls("mget")) == (1, 1)

    client.config_resetstat()
    rare, cursor = store.listing.list(repo="rare", limit=5)
    assert [job.id for job in rare] == [f"j{i:05d}" for i in range(9900, 9499, -100)]
    assert calls("mget") <= 3  # a few wide pages, not ten thousand reads

    more, _ = store.listing.list(repo="rare", limit=5, cursor=cursor)
    assert [job.id for job in more] == [f"j{i:05d}" for i in range(9400, 8999, -100)]


def test_list_limits_are_checked(store: JobStore) -> None:
    for limit in (0, 1001):
        with pytest.raises(ValueError):
            store.listing.list(limit=limit)
