"""``ScheduleLocks``: a short lock per schedule, so two triggers never start one run twice.
It is redis-py's ``Lock``: SET NX PX with a random token, released only by its holder (a
compare-and-delete script). The key and the token's meaning are those of earlier releases,
so a lock taken by one is respected by the other either way."""

from __future__ import annotations

import contextlib
import secrets

from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from bot.store.gateway import RedisGateway


class ScheduleLocks:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def schedule_lock(self, name: str, *, ttl_seconds: float) -> Lock:
        """The lock ``name`` (not taken yet), which expires ``ttl_seconds`` after it is."""
        return Lock(
            self._gateway.client,
            self._keys.schedule_lock(name),
            timeout=max(0.001, ttl_seconds),
            blocking=False,
            # The token is handed back to the caller, who may release from another thread.
            thread_local=False,
        )

    def try_lock(self, name: str, *, ttl_seconds: float) -> str | None:
        """Take the lock ``name`` for ``ttl_seconds``; its token, or None when it is held."""
        token = secrets.token_hex(16)
        with self._gateway.reachable():
            taken = self.schedule_lock(name, ttl_seconds=ttl_seconds).acquire(token=token)
        return token if taken else None

    def unlock(self, name: str, token: str) -> None:
        """Release the lock if ``token`` still holds it; a lock that expired and was taken by
        someone else stays theirs."""
        with self._gateway.reachable(), contextlib.suppress(LockNotOwnedError):
            self.schedule_lock(name, ttl_seconds=0).do_release(token)
