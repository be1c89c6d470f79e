"""Schedule locks: held once, released only by their token, expiring."""

from __future__ import annotations

import time

from bot.store.store import JobStore

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
