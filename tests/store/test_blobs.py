"""A parked job's run state and workspace snapshot in Redis."""

from __future__ import annotations

import pytest

from bot.core.errors import JobError
from bot.store.store import JobStore
from tests.store.kit import author, code_of


def test_run_state_and_snapshot_round_trip_and_are_dropped(store: JobStore) -> None:
    record = store.jobs.create(author())
    assert code_of(lambda: store.blobs.load_run_state(record.id)) == "BEM-502"
    assert store.blobs.load_snapshot(record.id) is None
    store.blobs.save_run_state(record.id, '{"version": 1}')
    blob = bytes(range(256)) * 16  # exactly the cap, every byte value
    store.blobs.save_snapshot(record.id, blob)
    assert store.blobs.load_run_state(record.id) == '{"version": 1}'
    assert store.blobs.load_snapshot(record.id) == blob
    store.blobs.drop_parked(record.id)
    assert store.blobs.load_snapshot(record.id) is None
    assert code_of(lambda: store.blobs.load_run_state(record.id)) == "BEM-502"


def test_a_snapshot_over_the_cap_is_refused_with_both_sizes(store: JobStore) -> None:
    record = store.jobs.create(author())
    with pytest.raises(JobError) as caught:
        store.blobs.save_snapshot(record.id, b"x" * 4097)
    assert caught.value.code == "BEM-503"
    assert "4097 bytes" in caught.value.message and "4096 bytes" in caught.value.message
    assert store.blobs.load_snapshot(record.id) is None
