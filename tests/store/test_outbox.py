"""The outbox against a real redis-server: entries come due, are held by one claimant for a
lease, come due again when a claimant dies, are tried again later or given up."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime

from bot.core.frames import ErrorInfo
from bot.store.models import OutboxEntry
from bot.store.outgoing import GIVEN_UP_KEPT_SECONDS
from bot.store.store import JobStore

ERROR = ErrorInfo(code="BEM-370", message="answered HTTP 503")


def _entry(job_id: str = "job1") -> OutboxEntry:
    return OutboxEntry(
        id=uuid.uuid4().hex,
        channel="approval_webhook",
        repo="docs",
        job_id=job_id,
        event="approval.parked",
        payload={"event": "approval.parked", "job_id": job_id},
        created_at=datetime.now(UTC),
    )


def test_an_added_entry_is_due_at_once_and_claimed_once(store: JobStore) -> None:
    entry = _entry()
    store.outbox.add(entry)
    assert store.outbox.next_due_in() == 0.0
    [claimed] = store.outbox.claim(lease_seconds=60)
    assert claimed.id == entry.id and claimed.payload == entry.payload
    assert claimed.attempts == 1
    # Held: nobody else gets it while the lease runs.
    assert store.outbox.claim(lease_seconds=60) == []
    assert 59 < (store.outbox.next_due_in() or 0) <= 60
    store.outbox.delivered(claimed)
    assert store.outbox.get(entry.id) is None and store.outbox.due() == 0
    assert store.outbox.next_due_in() is None


def test_a_claimant_that_dies_lets_the_entry_come_due_again(store: JobStore) -> None:
    entry = _entry()
    store.outbox.add(entry)
    assert [e.id for e in store.outbox.claim(lease_seconds=0.2)] == [entry.id]
    time.sleep(0.3)
    [again] = store.outbox.claim(lease_seconds=60)
    # The attempt the dead claimant made counts.
    assert (again.id, again.attempts) == (entry.id, 2)


def test_a_retry_is_due_later_with_its_error(store: JobStore) -> None:
    entry = _entry()
    store.outbox.add(entry)
    [claimed] = store.outbox.claim(lease_seconds=60)
    store.outbox.retry(claimed, error=ERROR, after_seconds=0.3)
    assert store.outbox.claim(lease_seconds=60) == []
    time.sleep(0.4)
    [again] = store.outbox.claim(lease_seconds=60)
    assert again.attempts == 2 and again.last_error == ERROR


def test_a_given_up_entry_is_never_due_and_is_kept_a_while(store: JobStore) -> None:
    entry = _entry()
    store.outbox.add(entry)
    [claimed] = store.outbox.claim(lease_seconds=60)
    store.outbox.give_up(claimed, error=ERROR)
    assert store.outbox.due() == 0 and store.outbox.claim(lease_seconds=0) == []
    kept = store.outbox.get(entry.id)
    assert kept is not None and kept.given_up_at is not None and kept.last_error == ERROR
    ttl = store.gateway.client.ttl(store.gateway.keys.outbox(entry.id))
    assert GIVEN_UP_KEPT_SECONDS - 5 < ttl <= GIVEN_UP_KEPT_SECONDS


def test_claimants_racing_on_many_entries_each_get_distinct_ones(store: JobStore) -> None:
    entries = [_entry(f"job{n}") for n in range(60)]
    for entry in entries:
        store.outbox.add(entry)
    claimed: list[list[str]] = [[] for _ in range(4)]

    def claim(slot: int) -> None:
        while batch := store.outbox.claim(lease_seconds=60, limit=3):
            claimed[slot].extend(entry.id for entry in batch)

    threads = [threading.Thread(target=claim, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    every = [entry_id for batch in claimed for entry_id in batch]
    assert sorted(every) == sorted(entry.id for entry in entries)
    assert len(set(every)) == len(every)


def test_an_entry_whose_document_is_gone_is_dropped_from_the_due_set(store: JobStore) -> None:
    entry = _entry()
    store.outbox.add(entry)
    store.gateway.client.delete(store.gateway.keys.outbox(entry.id))
    assert store.outbox.claim(lease_seconds=60) == []
    assert store.outbox.due() == 0
