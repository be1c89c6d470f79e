"""``Outbox``: calls to make outside Riverbeam (the parked-push webhook, forge posts),
queued in Redis so that none is made on a segment's path, none is lost with the worker that
queued it, and each is tried again until it is delivered or given up.

- ``outbox:<id>``: the entry (``OutboxEntry``);
- ``outbox:due``: the entries' ids by the time they are due (Redis's clock, epoch seconds);
- ``outbox-once:<id>``: an entry ``add_once`` queued, so it is never queued again;
- ``forge-comment:<digest of slot>``: a comment Riverbeam posted and edits in place (a
  job's status comment, a pull request's commit notes).

A worker takes due entries with ``claim``: one transaction moves each of them a lease into
the future and counts the attempt, so two workers never hold one at once, and one that dies
holding it lets it come due again when the lease runs out. Delivery is at least once: a
receiver tells a second delivery of an entry by its id. ``delivered`` drops an entry,
``retry`` makes it due again later, ``give_up`` takes it off the due set and keeps it for
``GIVEN_UP_KEPT_SECONDS``; a park queues its entries in its own transaction
(``records.queue_delivery``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from pydantic import TypeAdapter
from redis.client import Pipeline

from bot.core.frames import ErrorInfo
from bot.store.gateway import RedisGateway, Writes, server_now, text
from bot.store.models import OutboxEntry
from bot.store.records import maybe, queue_delivery

ENTRY: TypeAdapter[OutboxEntry] = TypeAdapter(OutboxEntry)
GIVEN_UP_KEPT_SECONDS = 7 * 86400
# How long a posted comment is edited in place (after its last edit); later, a new one.
COMMENT_KEPT_SECONDS = 90 * 86400
ONCE_KEPT_SECONDS = 30 * 86400


class Outbox:
    """The outbox of the deployment ``gateway`` serves."""

    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def add(self, entry: OutboxEntry) -> bool:
        """Queue ``entry``, due at once; False (nothing written) when an entry of its id is
        already there, so a task that runs twice queues a call once."""
        key = self._keys.outbox(entry.id)

        def body(pipe: Pipeline) -> tuple[bool, Writes | None]:
            if pipe.exists(key):
                return False, None
            return True, lambda tx: queue_delivery(tx, self._keys, entry)

        return self._gateway.atomic([key], body)

    def get(self, entry_id: str) -> OutboxEntry | None:
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._keys.outbox(entry_id))
        return maybe(ENTRY, raw, "an outbox entry")

    def due(self) -> int:
        """How many entries wait to be delivered (due now or later)."""
        with self._gateway.reachable():
            return int(self._gateway.client.zcard(self._keys.outbox_due))

    def next_due_in(self) -> float | None:
        """Seconds until the first entry is due (0 when one is), None when none waits."""
        with self._gateway.reachable():
            first = self._gateway.client.zrange(self._keys.outbox_due, 0, 0, withscores=True)
            now = server_now(self._gateway.client).timestamp()
        if not first:
            return None
        return max(0.0, float(first[0][1]) - now)

    def claim(self, *, lease_seconds: float, limit: int = 20) -> list[OutboxEntry]:
        """Up to ``limit`` due entries, each held for ``lease_seconds`` and its attempt
        counted; an id whose entry is gone is dropped from the due set."""
        due_key = self._keys.outbox_due

        def body(pipe: Pipeline) -> tuple[list[OutboxEntry], Writes | None]:
            now = server_now(pipe).timestamp()
            found = cast(list[bytes], pipe.zrangebyscore(due_key, "-inf", now, 0, limit))
            ids = [text(raw) for raw in found]
            if not ids:
                return [], None
            entry_keys = [self._keys.outbox(entry_id) for entry_id in ids]
            # An entry queued again meanwhile (a newer status revision) is not overwritten.
            pipe.watch(*entry_keys)  # type: ignore[no-untyped-call]
            raws = pipe.mget(entry_keys)
            claimed: list[OutboxEntry] = []
            gone: list[str] = []
            for entry_id, raw in zip(ids, raws, strict=True):
                entry = maybe(ENTRY, raw, "an outbox entry")
                if entry is None:
                    gone.append(entry_id)
                else:
                    claimed.append(entry.model_copy(update={"attempts": entry.attempts + 1}))

            def writes(tx: Pipeline) -> None:
                if gone:
                    tx.zrem(due_key, *gone)
                for entry in claimed:
                    tx.set(self._keys.outbox(entry.id), entry.model_dump_json())
                    tx.zadd(due_key, {entry.id: now + lease_seconds})

            return claimed, writes

        return self._gateway.atomic([due_key], body)

    def add_once(self, entry: OutboxEntry) -> bool:
        """Queue ``entry`` unless an entry of its id was ever queued (in the last
        ``ONCE_KEPT_SECONDS``), delivered or not: for a post that must not be made twice (a
        review), queued by a delivery that may itself run again. False: nothing written."""
        key, once = self._keys.outbox(entry.id), self._keys.outbox_once(entry.id)

        def body(pipe: Pipeline) -> tuple[bool, Writes | None]:
            if pipe.exists(once):
                return False, None

            def writes(tx: Pipeline) -> None:
                queue_delivery(tx, self._keys, entry)
                tx.set(once, "1", ex=ONCE_KEPT_SECONDS)

            return True, writes

        return self._gateway.atomic([key, once], body)

    def delivered(self, entry: OutboxEntry) -> None:
        """Drop ``entry``; but when it was queued again while it was being delivered (a job's
        status comment: a newer revision), it is due again at once instead."""
        key = self._keys.outbox(entry.id)

        def body(pipe: Pipeline) -> tuple[None, Writes | None]:
            stored = maybe(ENTRY, pipe.get(key), "an outbox entry")
            newer = stored is not None and stored.payload != entry.payload

            def writes(tx: Pipeline) -> None:
                if newer:
                    tx.zadd(self._keys.outbox_due, {entry.id: 0})
                else:
                    tx.delete(key)
                    tx.zrem(self._keys.outbox_due, entry.id)

            return None, writes

        self._gateway.atomic([key], body)

    def posted_comment(self, slot: str) -> str | None:
        """The comment posted for ``slot`` (a job's status, a pull request's commit notes)
        as ``keep_comment`` kept it, to be edited in place; None when there is none."""
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._keys.forge_comment(slot))
        return None if raw is None else text(raw)

    def keep_comment(self, slot: str, document: str) -> None:
        with self._gateway.reachable():
            self._gateway.client.set(
                self._keys.forge_comment(slot), document, ex=COMMENT_KEPT_SECONDS
            )

    def retry(self, entry: OutboxEntry, *, error: ErrorInfo, after_seconds: float) -> None:
        """Due again ``after_seconds`` from now, with ``error`` as the last attempt's."""
        with self._gateway.reachable():
            now = server_now(self._gateway.client).timestamp()
            pipe = self._gateway.client.pipeline(transaction=True)
            kept = entry.model_copy(update={"last_error": error})
            pipe.set(self._keys.outbox(entry.id), kept.model_dump_json())
            pipe.zadd(self._keys.outbox_due, {entry.id: now + after_seconds})
            pipe.execute()

    def give_up(self, entry: OutboxEntry, *, error: ErrorInfo) -> OutboxEntry:
        """Never tried again; kept for ``GIVEN_UP_KEPT_SECONDS`` for whoever looks."""
        kept = entry.model_copy(update={"last_error": error, "given_up_at": datetime.now(UTC)})
        with self._gateway.reachable():
            pipe = self._gateway.client.pipeline(transaction=True)
            pipe.set(self._keys.outbox(entry.id), kept.model_dump_json(), ex=GIVEN_UP_KEPT_SECONDS)
            pipe.zrem(self._keys.outbox_due, entry.id)
            pipe.execute()
        return kept
