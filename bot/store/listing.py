"""``JobListing``: the jobs list, newest first, in pages over the creation index, with an
opaque cursor for the next page."""

from __future__ import annotations

import base64
import binascii
import builtins
import json
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import TypedDict, Unpack, cast

from bot.core import jsonlimits
from bot.core.errors import JobError
from bot.store.gateway import RedisGateway
from bot.store.models import JobKind, JobRecord, JobState
from bot.store.records import RECORD, loaded

MAX_LIST_LIMIT = 1000
# A cursor this service issues is about 60 characters.
MAX_CURSOR_CHARS = 400
_SCAN_BATCH = 256


class JobFilters(TypedDict, total=False):
    """What ``JobStore.listing`` filters and pages by."""

    state: JobState | None
    kind: JobKind | None
    repo: str | None
    requested_by: str | None
    repos: Collection[str] | None
    cursor: str | None
    limit: int


@dataclass
class Listing:
    """A page of the jobs list: the records, the cursor of the next page (None on the last),
    and the ids of records on this page that could not be read."""

    records: list[JobRecord] = field(default_factory=list)
    next_cursor: str | None = None
    unreadable: list[str] = field(default_factory=list)


class JobListing:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def list(self, **filters: Unpack[JobFilters]) -> tuple[builtins.list[JobRecord], str | None]:
        """``listing``'s jobs and cursor, for callers that show no unreadable ids."""
        found = self.page(**filters)
        return found.records, found.next_cursor

    def page(
        self,
        *,
        state: JobState | None = None,
        kind: JobKind | None = None,
        repo: str | None = None,
        requested_by: str | None = None,
        repos: Collection[str] | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Jobs newest first, filtered (``repos``: any of these repositories); the cursor
        (None on the last page) continues after the last job returned. It walks the creation
        index in pages and loads only the records of each page, so a filter
        that matches little costs pages, not memory. A record that cannot be read is
        skipped and its id listed under ``unreadable``: one damaged record never hides the
        others."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        after = _decode_cursor(cursor)

        def wanted(record: JobRecord) -> bool:
            return (
                (state is None or record.state is state)
                and (kind is None or record.spec.kind is kind)
                and (repo is None or record.spec.repo == repo)
                and (requested_by is None or record.spec.requested_by == requested_by)
                and (repos is None or record.spec.repo in repos)
            )

        # Unfiltered, the first page is exactly what is needed; filtered, read wide pages.
        filtered = any(value is not None for value in (state, kind, repo, requested_by, repos))
        first = _SCAN_BATCH if filtered else limit + 1
        found: builtins.list[tuple[str, float, JobRecord | None]] = []
        with self._gateway.reachable():
            for rows in self._index_pages(after, first=first):
                raws = self._gateway.client.mget([self._keys.job(job_id) for job_id, _ in rows])
                for (job_id, score), raw in zip(rows, raws, strict=True):
                    if raw is None:
                        continue
                    try:
                        record = loaded(RECORD, raw, f"job {job_id}'s record")
                    except JobError:
                        found.append((job_id, score, None))
                        continue
                    if wanted(record):
                        found.append((job_id, score, record))
                if len(found) > limit:
                    break
        page = found[:limit]
        listing = Listing(next_cursor=_encode_cursor(*page[-1][:2]) if len(found) > limit else None)
        for job_id, _, record_or_none in page:
            if record_or_none is None:
                listing.unreadable.append(job_id)
            else:
                listing.records.append(record_or_none)
        return listing

    def _index_pages(
        self, after: tuple[float, str] | None, *, first: int
    ) -> Iterator[builtins.list[tuple[str, float]]]:
        """(job id, created score) of the creation index, newest first, after the cursor's
        job, in pages: ``first`` long, then wider ones for filters that skip most jobs."""
        top = "+inf" if after is None else repr(after[0])
        offset, size = 0, min(first, _SCAN_BATCH)
        while True:
            rows = cast(
                builtins.list[tuple[bytes, float]],
                self._gateway.client.zrevrangebyscore(
                    self._keys.jobs, top, "-inf", start=offset, num=size, withscores=True
                ),
            )
            offset += len(rows)
            # Jobs created in the same microsecond as the cursor's job sort by id, in reverse;
            # the ones up to the cursor's own id were on earlier pages.
            yield [
                (member.decode(), score)
                for member, score in rows
                if after is None or score < after[0] or member.decode() < after[1]
            ]
            if len(rows) < size:
                return
            size = _SCAN_BATCH


def _encode_cursor(job_id: str, score: float) -> str:
    raw = json.dumps([repr(score), job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    """(created score, id) of the last job a page returned; None for the first page."""
    if cursor is None:
        return None
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, job_id = jsonlimits.loads(raw, what="the cursor", max_depth=1)
        if isinstance(score, str) and isinstance(job_id, str) and math.isfinite(float(score)):
            return float(score), job_id
    except (binascii.Error, ValueError, TypeError):
        pass
    raise JobError("BEM-501", "the cursor is not one this service issued")
