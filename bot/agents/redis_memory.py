"""``RedisMemoryStore``: notes in a capped Redis list per scope, shared by every worker."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.agents.memory import DEFAULT_KEEP, Note, checked_note_text


class RedisMemoryStore:
    def __init__(self, redis: Redis, *, prefix: str = "riverbeam", keep: int = DEFAULT_KEEP):
        self._redis = redis
        self._prefix = prefix
        self._keep = keep

    def _key(self, scope: str) -> str:
        return f"{self._prefix}:memory:{scope}"

    async def remember(self, scope: str, text: str) -> Note:
        note = Note(scope=scope, text=checked_note_text(text))
        key = self._key(scope)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, note.model_dump_json())
            pipe.ltrim(key, -self._keep, -1)
            await pipe.execute()
        return note

    async def recall(self, scope: str, limit: int = 20) -> list[Note]:
        if limit <= 0:
            return []
        raw = await self._redis.lrange(self._key(scope), -limit, -1)
        return [Note.model_validate_json(item) for item in raw]
