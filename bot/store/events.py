"""``EventStreams``: each job's live frames, one Redis stream per job (``frame``: the
frame's JSON), ended by an ``end`` entry with the final state. Followers read it from any
entry id, blocking in slices."""

from __future__ import annotations

import logging
import re
import time
from typing import cast

from bot.core.errors import JobError
from bot.core.frames import ErrorFrame, ErrorInfo, Frame, frame_adapter
from bot.store.gateway import RedisGateway, text
from bot.store.models import JobEvent, JobState
from bot.store.records import append_entry, loaded

log = logging.getLogger(__name__)

# XREAD's reply: per stream, its name and its (entry id, fields) entries.
StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]
StreamReply = list[tuple[bytes, StreamEntries]]

# A blocking read waits in slices, so no single XREAD outlasts the client's socket timeout.
BLOCK_SLICE_MS = 1000
# ASCII digits only: ``\d`` also matches other scripts' digits, which Redis refuses.
_STREAM_ID = re.compile(r"^([0-9]{1,20}(-[0-9]{1,20})?|\$)$")


class EventStreams:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def append(self, job_id: str, frame: Frame) -> str:
        return self._append(job_id, {"frame": frame_adapter.dump_json(frame).decode()})

    def end(self, job_id: str, state: JobState) -> str:
        """Write the end marker. Moving a job to a final state already writes it (in the same
        transaction), so followers never wait on a job that ended."""
        if not state.is_final:
            raise ValueError(f"{state.value} is not a final state")
        return self._append(job_id, {"end": state.value})

    def _append(self, job_id: str, fields: dict[str, str]) -> str:
        with self._gateway.reachable():
            entry: bytes = append_entry(
                self._gateway.client, self._keys, job_id, fields, maxlen=self._gateway.events_maxlen
            )
        return entry.decode()

    def last_id(self, job_id: str) -> str:
        """The id of the newest event in the job's stream, "0-0" when it has none: where a
        follower that only wants what comes next starts."""
        with self._gateway.reachable():
            newest = cast(
                StreamEntries, self._gateway.client.xrevrange(self._keys.events(job_id), count=1)
            )
        return text(newest[0][0]) if newest else "0-0"

    def has(self, job_id: str, event_id: str) -> bool:
        """Whether the job's stream holds the event ``event_id`` (a full ``ms-seq`` id)."""
        with self._gateway.reachable():
            found = self._gateway.client.xrange(
                self._keys.events(job_id), event_id, event_id, count=1
            )
        return bool(found)

    def read(
        self, job_id: str, *, after: str = "0-0", block_ms: int | None = None, count: int = 200
    ) -> list[JobEvent]:
        """Up to ``count`` events after entry id ``after`` (``"$"``: only new ones). With
        ``block_ms`` the call waits up to that long for the first one (0: until one comes);
        an empty list means none arrived in time."""
        if not _STREAM_ID.fullmatch(after):
            raise JobError("BEM-501", f"{after!r} is not an event id (like 1700000000000-0)")
        if block_ms is not None and block_ms < 0:
            raise ValueError("block_ms must be 0 (wait until an event comes) or more")
        if count < 1:
            raise ValueError("count must be at least 1")
        key = self._keys.events(job_id)
        deadline = None if not block_ms else time.monotonic() + block_ms / 1000
        # "$" means "after the newest entry now"; fix it once so the slices below do not
        # each skip what arrived in between.
        if after == "$":
            after = self.last_id(job_id)
        with self._gateway.reachable():
            while True:
                block = None
                if block_ms is not None:
                    left = BLOCK_SLICE_MS if deadline is None else deadline - time.monotonic()
                    block = max(1, min(BLOCK_SLICE_MS, int(left * 1000)))
                reply = cast(
                    StreamReply, self._gateway.client.xread({key: after}, count=count, block=block)
                )
                if reply or block is None:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    return []
        return [_event(entry_id, fields) for _, entries in reply for entry_id, fields in entries]


def _event(entry_id: bytes, fields: dict[bytes, bytes]) -> JobEvent:
    """The stream entry as an event; one that cannot be read becomes a BEM-517 error frame
    in its place, so it never stops a stream or hides the entries after it."""
    event_id = entry_id.decode()
    try:
        if b"end" in fields:
            return JobEvent(id=event_id, end=JobState(fields[b"end"].decode()))
        return JobEvent(id=event_id, frame=loaded(frame_adapter, fields[b"frame"], "an event"))
    except (KeyError, ValueError, JobError):
        log.warning("event %s cannot be read; it is shown as unreadable", event_id)
    message = f"event {event_id} cannot be read; it is skipped"
    return JobEvent(id=event_id, frame=ErrorFrame(error=ErrorInfo(code="BEM-517", message=message)))
