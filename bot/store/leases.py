"""``Leases``: a running job belongs to the worker whose lease is current. The lease is a
field of the job record (compare-and-set with it, through the job's one write path); the
lease index (``<prefix>:leases``) is what the recovery sweep reads."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from bot.store.gateway import RedisGateway, server_now, text
from bot.store.job_records import JobRecords
from bot.store.models import JobRecord, JobState


class Leases:
    def __init__(self, gateway: RedisGateway, jobs: JobRecords) -> None:
        self._gateway = gateway
        self._keys = gateway.keys
        self._jobs = jobs

    def renew(self, job_id: str, *, worker: str, lease_seconds: float) -> bool:
        """Extend ``worker``'s lease; False when the job is no longer running under it (it
        was taken over or ended), and the worker must stop."""
        return self.renew_record(job_id, worker=worker, lease_seconds=lease_seconds) is not None

    def renew_record(self, job_id: str, *, worker: str, lease_seconds: float) -> JobRecord | None:
        """``renew_lease``, with the record as renewed (None when the lease is lost): its
        ``cancel_requested`` is how a cancel an earlier release asked for, which set no
        cancel flag, reaches the worker."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state is not JobState.RUNNING or record.worker != worker:
                return None
            return {"lease_until": now + timedelta(seconds=lease_seconds)}

        return self._jobs.change_job(job_id, change)[0]

    def expired(self, *, limit: int = 100) -> list[str]:
        """Running jobs whose lease ran out (their worker died or lost Redis), oldest
        first: what ``recover_jobs`` hands to a live worker. Reads the lease index only,
        whatever the number of jobs. Until the jobs a release without cancel flags asked to
        cancel all have theirs, each call also flags one page of them
        (``JobRecords.backfill_cancel_flags``)."""
        self._jobs.backfill_cancel_flags()
        with self._gateway.reachable():
            now = server_now(self._gateway.client).timestamp()
            found = self._gateway.client.zrangebyscore(
                self._keys.leases, "-inf", now, start=0, num=limit
            )
        return [text(cast(bytes, job_id)) for job_id in found]

    def forget(self, job_id: str) -> None:
        """Drop a job the store no longer has from the lease index."""
        with self._gateway.reachable():
            self._gateway.client.zrem(self._keys.leases, job_id)
