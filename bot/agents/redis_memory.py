"""``RedisMemoryStore``: notes in a capped Redis list per scope, shared by every worker."""

from __future__ import annotations

from collections.abc import Callable

from redis import Redis

from bot.agents.memory import DEFAULT_KEEP, Note, checked_note_text


class RedisMemoryStore:
    """``key(scope)`` names a scope's list: ``bot.store.keys.Keys(prefix).memory``, which the
    executor passes in (the agents sit below the store and do not import it).

    On a synchronous client: the worker's job store's own, whose pooled connection outlives
    the segment (an asyncio client would be bound to the segment's event loop, so each segment
    would open, greet and close a connection of its own). A call is one loopback round trip,
    as the store's event writes made from the same loop are."""

    def __init__(self, redis: Redis, *, key: Callable[[str], str], keep: int = DEFAULT_KEEP):
        self._redis = redis
        self._key = key
        self._keep = keep

    async def remember(self, scope: str, text: str) -> Note:
        note = Note(scope=scope, text=checked_note_text(text))
        key = self._key(scope)
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, note.model_dump_json())
            pipe.ltrim(key, -self._keep, -1)
            pipe.execute()
        return note

    async def recall(self, scope: str, limit: int = 20) -> list[Note]:
        if limit <= 0:
            return []
        raw: list[bytes] = self._redis.lrange(self._key(scope), -limit, -1)  # type: ignore[assignment]
        return [Note.model_validate_json(item) for item in raw]
