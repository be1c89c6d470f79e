"""Schedule locks: held once, released only by their token, expiring."""

from __future__ import annotations

import time

import redis

from bot.store.store import JobStore


def test_a_schedule_lock_is_held_once_and_released_only_by_its_token(store: JobStore) -> None:
    token = store.locks.try_lock("docs", ttl_seconds=30)
    assert token is not None
    assert store.locks.try_lock("docs", ttl_seconds=30) is None
    store.locks.unlock("docs", "not-the-token")
    assert store.locks.try_lock("docs", ttl_seconds=30) is None
    store.locks.unlock("docs", token)
    assert store.locks.try_lock("docs", ttl_seconds=30) is not None


def test_a_schedule_lock_expires(store: JobStore) -> None:
    first = store.locks.try_lock("api", ttl_seconds=0.1)
    assert first is not None
    time.sleep(0.2)
    second = store.locks.try_lock("api", ttl_seconds=30)
    assert second is not None
    store.locks.unlock("api", first)  # the expired holder cannot release the new one
    assert store.locks.try_lock("api", ttl_seconds=30) is None


def test_a_lock_of_the_previous_release_holds_and_is_released_by_its_token(
    store: JobStore, client: redis.Redis
) -> None:
    """The previous release took the lock with SET NX PX and a hex token, and released it
    by comparing the stored token; both sides read the other's lock the same way."""
    key = store.gateway.keys.schedule_lock("docs")
    assert client.set(key, "0123abcd" * 4, nx=True, px=30_000)
    assert store.locks.try_lock("docs", ttl_seconds=30) is None
    store.locks.unlock("docs", "not-the-token")
    assert client.get(key) == b"0123abcd" * 4
    store.locks.unlock("docs", "0123abcd" * 4)
    token = store.locks.try_lock("docs", ttl_seconds=30)
    assert token is not None
    assert client.get(key) == token.encode()  # what the previous release compares with
    assert 0 < client.pttl(key) <= 30_000
