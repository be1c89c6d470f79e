"""Following a job's event stream, for every surface: the CLI prints what it yields, the API
and the web pages turn it into server-sent events (``bot.http.event_stream``, one step at a
time in a worker thread).

A job parks, waits in its queue or ends without a trimmed stream saying so, so a follower
that reads nothing looks at the job record too: at the first quiet read, then at most every
``look_every`` seconds of quiet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.store.models import JobEvent, JobRecord

if TYPE_CHECKING:
    from bot.store.store import JobStore


@dataclass(frozen=True)
class Quiet:
    """A read that brought nothing; ``record`` is the job as looked at after it (not final),
    or None when it was not looked at this time."""

    record: JobRecord | None


@dataclass(frozen=True)
class StreamEnd:
    """The job ended with no end entry after the follower's place in the stream (it resumed
    past it, or the stream was trimmed): the record says how."""

    record: JobRecord


FollowItem = JobEvent | Quiet | StreamEnd
"""What a follow yields: each event (the last one is the end entry), or a quiet read, or the
end read from the record."""


def follow_events(
    store: JobStore, job_id: str, *, after: str, wait_ms: int, look_every: float
) -> Iterator[FollowItem]:
    """The job's events after entry ``after``, then each one as it comes, each blocking read
    waiting at most ``wait_ms``; it stops after the end entry or a ``StreamEnd``."""
    block: int | None = None  # the first read answers at once with what is stored
    looked = False
    quiet_since = time.monotonic()
    while True:
        events = store.events.read(job_id, after=after, block_ms=block)
        block = wait_ms
        for event in events:
            yield event
            after = event.id
            if event.end is not None:
                return
        if events:
            quiet_since = time.monotonic()
            continue
        if looked and time.monotonic() - quiet_since < look_every:
            yield Quiet(None)
            continue
        looked, quiet_since = True, time.monotonic()
        record = store.jobs.get(job_id)
        if store.events.read(job_id, after=after, count=1):
            continue  # something arrived between the read and the look at the record
        if record.state.is_final:
            yield StreamEnd(record)
            return
        yield Quiet(record)
