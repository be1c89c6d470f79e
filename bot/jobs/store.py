"""``JobStore``: job records, run state, parked snapshots, event streams, approvals and
schedule locks in Redis, shared by every worker, the API and the CLI.

Every change to a job or an approval is an optimistic transaction (WATCH, read, MULTI, EXEC)
that retries when another writer got there first, so two workers can never both move a job
and a decision applies once. Timestamps come from the Redis server's clock, so leases mean
the same thing on every worker host whatever their clocks say. The key layout and what
survives a Redis restart are in docs/storage.md.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import json
import logging
import math
import random
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, TypeVar, Unpack, cast

import redis
from pydantic import TypeAdapter, ValidationError
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from bot.config import Settings
from bot.core import jsonlimits
from bot.core.errors import ApprovalError, BeamError, JobError
from bot.core.frames import ErrorFrame, ErrorInfo, Frame, frame_adapter
from bot.store.models import (
    TRANSITIONS,
    Approval,
    ApprovalState,
    ApprovalSummary,
    DecisionBinding,
    JobEvent,
    JobKind,
    JobRecord,
    JobSpec,
    JobState,
    PushState,
    UpstreamPush,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
# The writes of an optimistic transaction, queued on the pipeline after MULTI.
Writes = Callable[[Pipeline], None]
# XREAD's reply: per stream, its name and its (entry id, fields) entries.
StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]
StreamReply = list[tuple[bytes, StreamEntries]]

IDEMPOTENCY_TTL_SECONDS = 24 * 3600
# Optimistic transactions retry when a watched key changed. Each round lets at least one
# writer through, so this bound is only reached under pathological contention.
MAX_WATCH_RETRIES = 100
# A blocking read waits in slices, so no single XREAD outlasts the client's socket timeout.
BLOCK_SLICE_MS = 1000
MAX_LIST_LIMIT = 1000
_SCAN_BATCH = 256
# Keys one SCAN step of the decided-approvals backfill looks at (approval keys among them
# are read whole).
_BACKFILL_BATCH = 1000
# Redis refuses writes with these replies while it is out of memory (noeviction), cannot
# persist, or is a read-only replica: for a caller that is the store being unavailable.
_UNAVAILABLE_REPLIES = ("OOM", "MISCONF", "READONLY")
# ASCII digits only: ``\d`` also matches other scripts' digits, which Redis refuses.
_STREAM_ID = re.compile(r"^([0-9]{1,20}(-[0-9]{1,20})?|\$)$")
# A cursor this service issues is about 60 characters.
MAX_CURSOR_CHARS = 400
# Fields of a JobRecord that only the store sets.
_STORE_FIELDS = frozenset({"id", "spec", "state", "version", "created_at", "updated_at"})


class Breaker:
    """Fail fast while Redis is known to be down: after a call timed out or could not
    connect, calls fail at once for ``seconds``; then one call goes through to see whether
    Redis is back (the others still fail fast until it ends), and its outcome closes the
    breaker or opens it again. A hung Redis costs one call its socket timeout, not every call
    its timeout and retries. ``seconds`` 0: never open."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._lock = threading.Lock()
        self._tripped = False
        self._open_until = 0.0

    def wait_left(self) -> float:
        """Seconds the breaker stays open, 0 when this call may go to Redis."""
        with self._lock:
            now = time.monotonic()
            if now < self._open_until:
                return self._open_until - now
            if self._tripped:
                self._open_until = now + self._seconds  # this call is the trial
            return 0.0

    def record(self, *, failed: bool) -> None:
        if self._seconds <= 0:
            return
        with self._lock:
            if failed:
                self._tripped, self._open_until = True, time.monotonic() + self._seconds
            elif self._tripped:
                self._tripped, self._open_until = False, 0.0


class JobStore:
    def __init__(
        self,
        redis: redis.Redis,
        *,
        prefix: str = "riverbeam",
        events_maxlen: int = 10_000,
        snapshot_max_bytes: int = 32 << 20,
        breaker_seconds: float = 0.0,
    ) -> None:
        if redis.connection_pool.connection_kwargs.get("decode_responses"):
            # Snapshots are bytes; a decoding client would mangle them.
            raise ValueError("JobStore needs a Redis client with decode_responses=False")
        self._redis = redis
        self._prefix = prefix
        self._events_maxlen = events_maxlen
        self._snapshot_max_bytes = snapshot_max_bytes
        self._breaker = Breaker(breaker_seconds)
        self._where = describe_redis(redis)
        self._deployment: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float = 10.0,
        retry_timeouts: bool = True,
        **kw: Any,
    ) -> JobStore:
        """A store on a new client for ``url`` (``redis://[user:password@]host:port/db``).

        Short connect and read timeouts and two quick reconnect attempts: a Redis outage
        surfaces as BEM-504 within seconds instead of hanging a worker. Without
        ``retry_timeouts`` a call that timed out is not tried again (a dropped connection
        still is): what the API wants, where a hung Redis must cost a request one timeout."""
        retried = (
            (RedisConnectionError, RedisTimeoutError) if retry_timeouts else (RedisConnectionError,)
        )
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=min(5.0, socket_timeout),
            socket_timeout=socket_timeout,
            health_check_interval=30,
            retry=Retry(
                ExponentialBackoff(cap=0.5, base=0.05), retries=2, supported_errors=retried
            ),
        )
        return cls(client, **kw)

    @classmethod
    def for_settings(cls, settings: Settings, *, api: bool = False) -> JobStore:
        """The store the configuration names, with its key prefix and caps. The API's
        (``api``) waits ``api.redis_timeout_seconds`` for an answer, never retries a
        timeout, and fails fast for ``api.redis_breaker_seconds`` after one."""
        limits: dict[str, Any] = {}
        if api:
            limits = {
                "socket_timeout": settings.api.redis_timeout_seconds,
                "retry_timeouts": False,
                "breaker_seconds": settings.api.redis_breaker_seconds,
            }
        return cls.from_url(
            settings.redis_url,
            prefix=settings.jobs.prefix,
            events_maxlen=settings.jobs.events_maxlen,
            snapshot_max_bytes=settings.jobs.snapshot_max_bytes,
            **limits,
        )

    # keys ------------------------------------------------------------------------------

    def _job_key(self, job_id: str) -> str:
        return f"{self._prefix}:job:{job_id}"

    @property
    def _jobs_key(self) -> str:
        return f"{self._prefix}:jobs"

    def _run_key(self, job_id: str) -> str:
        return f"{self._prefix}:run:{job_id}"

    def _snapshot_key(self, job_id: str) -> str:
        return f"{self._prefix}:snapshot:{job_id}"

    def _events_key(self, job_id: str) -> str:
        return f"{self._prefix}:events:{job_id}"

    @property
    def _leases_key(self) -> str:
        return f"{self._prefix}:leases"

    def _approval_key(self, job_id: str) -> str:
        return f"{self._prefix}:approval:{job_id}"

    @property
    def _pending_key(self) -> str:
        return f"{self._prefix}:approvals:pending"

    @property
    def _decided_key(self) -> str:
        return f"{self._prefix}:approvals:decided"

    @property
    def _summaries_key(self) -> str:
        return f"{self._prefix}:approvals:summaries"

    def _history_key(self, job_id: str) -> str:
        return f"{self._prefix}:approvals:history:{job_id}"

    def _idem_key(self, key: str) -> str:
        # Hashed: a client-chosen key may be long or contain anything.
        return f"{self._prefix}:idem:{hashlib.sha256(key.encode()).hexdigest()}"

    def _lock_key(self, name: str) -> str:
        return f"{self._prefix}:schedule:{name}"

    @property
    def _deployment_key(self) -> str:
        return f"{self._prefix}:deployment"

    def deployment(self) -> str:
        """This deployment's identity: a random id stored once in the store (SET NX), so
        every worker and API process of one Redis database and key prefix reads the same,
        whatever host name they reach Redis by, and a second deployment never does. The
        sandbox containers of this deployment carry it as a label; its reaper removes only
        those (``sandbox.host.container.reaper``)."""
        if self._deployment is None:
            key = self._deployment_key
            with self.reachable():
                self._redis.set(key, secrets.token_hex(8), nx=True)
                raw = self._redis.get(key)
            if raw is None:
                raise BeamError("BEM-504", f"the job store lost {key} as it was written")
            self._deployment = _text(raw)
        return self._deployment

    # plumbing --------------------------------------------------------------------------

    # Documents kept beside the store's (scheduled runs, web sessions) use the same client,
    # key prefix, outage handling and transactions through these four.

    @property
    def client(self) -> redis.Redis:
        return self._redis

    def key(self, *parts: str) -> str:
        """``<prefix>:<part>:<part>...``: a key of this deployment's Redis keyspace."""
        return ":".join((self._prefix, *parts))

    @contextmanager
    def reachable(self) -> Iterator[None]:
        """Turn a Redis outage into BEM-504. The message names the host, never the URL,
        which may carry a password. While the breaker is open, BEM-504 comes at once."""
        left = self._breaker.wait_left()
        if left:
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) did not answer a moment ago; "
                f"it is tried again in {left:.1f} s",
            )
        failed = False
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError) as exc:
            failed = True
            reason = "timed out" if isinstance(exc, RedisTimeoutError) else "connection failed"
            if isinstance(exc, redis.exceptions.AuthenticationError):
                reason = "authentication failed"
            elif isinstance(exc, redis.exceptions.BusyLoadingError):
                reason = "still loading its data after a restart"
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) is unreachable: {reason}. "
                "Check that Redis is running and that redis_url points at it.",
            ) from exc
        except ResponseError as exc:
            if not str(exc).startswith(_UNAVAILABLE_REPLIES):
                raise
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) refuses writes: {exc}",
            ) from exc
        finally:
            self._breaker.record(failed=failed)

    def atomic(
        self,
        watch: Collection[str],
        body: Callable[[Pipeline], tuple[T, Writes | None]],
    ) -> T:
        """Run ``body`` under WATCH on ``watch``; it reads through the pipeline (immediate
        mode) and returns its value and the writes to queue, or None to write nothing. The
        writes run in MULTI/EXEC; when a watched key changed meanwhile, everything reruns."""
        with self.reachable():
            for attempt in range(MAX_WATCH_RETRIES):
                with self._redis.pipeline(transaction=True) as pipe:
                    try:
                        if watch:
                            pipe.watch(*watch)  # type: ignore[no-untyped-call]
                        value, writes = body(pipe)
                        if writes is not None:
                            pipe.multi()
                            writes(pipe)
                            pipe.execute()
                        return value
                    except WatchError:
                        # Jitter spreads the retries of writers that collided together.
                        time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
        keys = ", ".join(sorted(watch))
        raise BeamError(
            "BEM-504",
            f"the job store is overloaded: {keys} changed under {MAX_WATCH_RETRIES} "
            "attempts in a row to update it; try again",
        )

    @staticmethod
    def _server_now(pipe: redis.Redis) -> datetime:
        seconds, micros = pipe.time()
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)

    def _read_job(self, pipe: redis.Redis, job_id: str) -> JobRecord:
        raw = pipe.get(self._job_key(job_id))
        if raw is None:
            raise JobError("BEM-500", f"no job with id {job_id!r}")
        return _loaded(_RECORD, raw, f"job {job_id}'s record")

    def _read_approval(self, pipe: redis.Redis, job_id: str) -> Approval | None:
        raw = pipe.get(self._approval_key(job_id))
        return None if raw is None else _loaded(_APPROVAL, raw, f"job {job_id}'s approval")

    def _xadd(self, target: redis.Redis, job_id: str, fields: dict[str, str]) -> Any:
        """Append to the job's stream, trimmed to about ``events_maxlen`` entries (``~``
        lets Redis trim whole nodes, which is much cheaper than an exact cap)."""
        return target.xadd(
            self._events_key(job_id),
            dict(fields),  # type: ignore[arg-type]  # redis-py's field type is invariant
            maxlen=self._events_maxlen,
            approximate=True,
        )

    # jobs ------------------------------------------------------------------------------

    def create(self, spec: JobSpec, *, idempotency_key: str | None = None) -> JobRecord:
        """Store a new queued job. With an ``idempotency_key`` seen in the last 24 hours,
        the job created then comes back and nothing new is stored; reusing a key for a
        different request is BEM-501."""
        idem = None if idempotency_key is None else self._idem_key(idempotency_key)

        def body(pipe: Pipeline) -> tuple[JobRecord, Writes | None]:
            if idem is not None:
                existing = pipe.get(idem)
                if existing is not None:
                    return self._same_request(pipe, _text(existing), spec), None
            job_id = self._fresh_id(pipe)
            now = self._server_now(pipe)
            record = JobRecord(id=job_id, spec=spec, created_at=now, updated_at=now)

            def writes(tx: Pipeline) -> None:
                tx.set(self._job_key(job_id), record.model_dump_json())
                tx.zadd(self._jobs_key, {job_id: now.timestamp()})
                if idem is not None:
                    tx.set(idem, job_id, ex=IDEMPOTENCY_TTL_SECONDS)

            return record, writes

        return self.atomic([idem] if idem else [], body)

    def _fresh_id(self, pipe: Pipeline) -> str:
        """A new job id, watched so that a concurrent create of the same id fails ours. Ids
        are 48 random bits: short enough for branch names, and a collision draws again."""
        while True:
            job_id = uuid.uuid4().hex[:12]
            pipe.watch(self._job_key(job_id))  # type: ignore[no-untyped-call]
            if not pipe.exists(self._job_key(job_id)):
                return job_id

    def _same_request(self, pipe: Pipeline, job_id: str, spec: JobSpec) -> JobRecord:
        record = self._read_job(pipe, job_id)
        if record.spec != spec:
            raise JobError(
                "BEM-501",
                f"the idempotency key was already used for job {job_id} with a different "
                "request; use a new key for a new job",
            )
        return record

    def get(self, job_id: str) -> JobRecord:
        with self.reachable():
            return self._read_job(self._redis, job_id)

    def find(self, job_id: str) -> JobRecord | None:
        """The job, or None when the store does not know it (``get`` says BEM-500)."""
        with self.reachable():
            raw = self._redis.get(self._job_key(job_id))
        return None if raw is None else _loaded(_RECORD, raw, f"job {job_id}'s record")

    def is_final_or_unknown(self, job_id: str) -> bool:
        """For workspace retention: a workspace whose job ended, or that the store no longer
        knows, may age out."""
        record = self.find(job_id)
        return record is None or record.state.is_final

    def transition(
        self,
        job_id: str,
        to: JobState,
        *,
        from_states: Collection[JobState],
        expect_version: int | None = None,
        owner: str | None = None,
        **changes: Any,
    ) -> JobRecord | None:
        """Move the job to ``to`` if it is in ``from_states`` (and at ``expect_version``, and
        held by worker ``owner``, when given); None when it is not: someone else moved it.
        ``changes`` are other JobRecord fields to set. A move TRANSITIONS forbids, or a
        change to a field only the store sets, is a ValueError: a programming error."""
        _check_moves(from_states, to)
        names = set(changes)
        bad = sorted((names & _STORE_FIELDS) | (names - set(JobRecord.model_fields)))
        if bad:
            raise ValueError(f"transition cannot set {', '.join(bad)}")

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state not in from_states:
                return None
            if expect_version is not None and record.version != expect_version:
                return None
            if owner is not None and record.worker != owner:
                return None
            return {**changes, "state": to}

        return self._change_job(job_id, change)[0]

    def claim(
        self,
        job_id: str,
        *,
        worker: str,
        lease_seconds: float,
        from_states: Collection[JobState] = (JobState.QUEUED,),
    ) -> JobRecord | None:
        """Make ``worker`` the job's runner: running, attempt + 1, a lease of
        ``lease_seconds``. A running job whose lease ran out (its worker died) is taken
        over; one whose lease is live is not, whatever ``from_states`` says. None when the
        job cannot be claimed: a duplicate or redelivered task does nothing."""
        _check_moves(from_states, JobState.RUNNING)

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state is JobState.RUNNING:
                if _leased(record, now):
                    return None
            elif record.state not in from_states:
                return None
            return _running(record, worker, now, lease_seconds)

        return self._change_job(job_id, change)[0]

    def claim_resume(
        self, job_id: str, *, worker: str, lease_seconds: float
    ) -> tuple[JobRecord, Approval] | None:
        """Take a parked job whose approval is decided and not yet applied: the job goes to
        running under ``worker`` and the approval is marked applied, in one transaction, so
        exactly one resume acts on a decision. A job still waiting for a person, or whose
        decision another resume already took, is None: the task does nothing."""
        job_key, approval_key = self._job_key(job_id), self._approval_key(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[JobRecord, Approval] | None, Writes | None]:
            record = self._read_job(pipe, job_id)
            approval = self._read_approval(pipe, job_id)
            if approval is None or not _awaits_resume(record, approval):
                return None, None
            now = self._server_now(pipe)
            running = _running(record, worker, now, lease_seconds)
            claimed = record.model_copy(
                update={**running, "version": record.version + 1, "updated_at": now}
            )
            applied = approval.model_copy(update={"applied": True})

            def writes(tx: Pipeline) -> None:
                tx.set(job_key, claimed.model_dump_json())
                tx.set(approval_key, applied.model_dump_json())
                tx.zrem(self._decided_key, job_id)
                self._index_lease(tx, claimed)

            return (claimed, applied), writes

        return self.atomic([job_key, approval_key], body)

    def renew_lease(self, job_id: str, *, worker: str, lease_seconds: float) -> bool:
        """Extend ``worker``'s lease; False when the job is no longer running under it (it
        was taken over or ended), and the worker must stop."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state is not JobState.RUNNING or record.worker != worker:
                return None
            return {"lease_until": now + timedelta(seconds=lease_seconds)}

        return self._change_job(job_id, change)[0] is not None

    def request_cancel(
        self, job_id: str, *, authorize: Callable[[JobRecord], None] | None = None
    ) -> JobRecord:
        """Ask for the job to stop; ``authorize(record)`` runs first, inside the transaction,
        and raises when the caller may not cancel it. A job no worker holds (queued, parked,
        or running under a lease that ran out) is cancelled at once, its pending approval
        withdrawn; a running one gets ``cancel_requested`` and its worker ends it between tool
        calls; a final job comes back unchanged. While its worker pushes upstream, BEM-512:
        the push cannot be called back, and a cancel then would end the job saying nothing
        went out."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if authorize is not None:
                authorize(record)
            if record.state.is_final:
                return None
            if record.state is JobState.RUNNING and _leased(record, now):
                pushing = record.push_under_way
                if pushing is not None:
                    raise JobError(
                        "BEM-512",
                        f"job {job_id} is pushing {pushing.sha[:12]} to {pushing.ref!r} "
                        "upstream; the push is under way and cannot be cancelled. Wait for it "
                        "to finish (the job's pushes say what reached the upstream), then "
                        "cancel if you still want the job stopped",
                    )
                return None if record.cancel_requested else {"cancel_requested": True}
            error = ErrorInfo(code="BEM-506", message=f"cancelled while {record.state.value}")
            return {"state": JobState.CANCELLED, "cancel_requested": True, "error": error}

        new, current = self._change_job(job_id, change)
        return current if new is None else new

    def begin_push(self, job_id: str, *, worker: str, sha: str, ref: str) -> None:
        """Record that ``worker`` starts pushing ``sha`` to ``ref`` upstream, unless the job
        was cancelled (BEM-506) or is no longer its own (BEM-507): then nothing may go out.
        From here until ``end_push`` a cancel is refused (BEM-512)."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state is not JobState.RUNNING or record.worker != worker:
                raise BeamError("BEM-507", f"job {job_id} is no longer this worker's; nothing sent")
            if record.cancel_requested:
                raise BeamError(
                    "BEM-506", f"job {job_id} was cancelled before its push; nothing sent"
                )
            return {"pushes": [*record.pushes, UpstreamPush(sha=sha, ref=ref, started_at=now)]}

        self._change_job(job_id, change)

    def end_push(
        self,
        job_id: str,
        *,
        worker: str,
        already_there: bool = False,
        error: ErrorInfo | None = None,
    ) -> None:
        """Record how the push ``begin_push`` started ended: landed, or failed with
        ``error``. A job that is no longer ``worker``'s is left alone (whoever holds it now
        pushes again, and the relay finds the commit there)."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            pushing = record.push_under_way
            if pushing is None or record.worker != worker or record.state.is_final:
                return None
            ended = pushing.model_copy(
                update={
                    "state": PushState.LANDED if error is None else PushState.FAILED,
                    "ended_at": now,
                    "already_there": already_there,
                    "error": error,
                }
            )
            return {"pushes": [*record.pushes[:-1], ended]}

        self._change_job(job_id, change)

    def _change_job(
        self, job_id: str, change: Callable[[JobRecord, datetime], dict[str, Any] | None]
    ) -> tuple[JobRecord | None, JobRecord]:
        """The one write path for a job: ``change`` returns the fields to set (or None to
        leave the job as it is); the store adds version and updated_at, drops the lease when
        the job stops running, and when the job ends writes the end event and withdraws its
        pending approval in the same transaction. Returns (written record or None, record
        as read)."""
        job_key, approval_key = self._job_key(job_id), self._approval_key(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[JobRecord | None, JobRecord], Writes | None]:
            record = self._read_job(pipe, job_id)
            now = self._server_now(pipe)
            updates = change(record, now)
            if updates is None:
                return (None, record), None
            fields = {**record.model_dump(), **updates}
            fields.update(version=record.version + 1, updated_at=now)
            if fields["state"] is not JobState.RUNNING:
                fields["lease_until"] = None
            ends = fields["state"].is_final and not record.state.is_final
            if ends:
                fields["pushes"] = [
                    _settled(UpstreamPush.model_validate(push), now) for push in fields["pushes"]
                ]
            new = JobRecord.model_validate(fields)
            approval = self._read_approval(pipe, job_id) if ends else None

            def writes(tx: Pipeline) -> None:
                tx.set(job_key, new.model_dump_json())
                self._index_lease(tx, new)
                if ends:
                    self._xadd(tx, job_id, {"end": new.state.value})
                if approval is not None and approval.state is ApprovalState.PENDING:
                    self._queue_withdrawal(tx, approval, new.state, now)

            return (new, record), writes

        return self.atomic([job_key, approval_key], body)

    def _index_lease(self, tx: Pipeline, record: JobRecord) -> None:
        """Keep the lease index in step with the record: a running job is there under its
        lease's end, any other job is not."""
        if record.state is JobState.RUNNING and record.lease_until is not None:
            tx.zadd(self._leases_key, {record.id: record.lease_until.timestamp()})
        else:
            tx.zrem(self._leases_key, record.id)

    def expired_leases(self, *, limit: int = 100) -> builtins.list[str]:
        """Running jobs whose lease ran out (their worker died or lost Redis), oldest
        first: what ``recover_jobs`` hands to a live worker. Reads the lease index only,
        whatever the number of jobs."""
        with self.reachable():
            now = self._server_now(self._redis).timestamp()
            found = self._redis.zrangebyscore(self._leases_key, "-inf", now, start=0, num=limit)
        return [_text(cast(bytes, job_id)) for job_id in found]

    def forget_lease(self, job_id: str) -> None:
        """Drop a job the store no longer has from the lease index."""
        with self.reachable():
            self._redis.zrem(self._leases_key, job_id)

    def unapplied_decisions(
        self, *, older_than: float, limit: int = 100
    ) -> builtins.list[JobRecord]:
        """Parked jobs whose approval was decided at least ``older_than`` seconds ago (the
        server's clock) and that no resume has claimed: their resume message was lost.
        Oldest decision first. Reads the index of decided approvals only, whatever the
        number of jobs; entries whose job moved on (resumed, cancelled) leave the index.
        Until decisions recorded before the index existed are all in it, each call also
        indexes one page of them (``_backfill_decided``)."""
        self._backfill_decided()
        key = self._decided_key

        def body(pipe: Pipeline) -> tuple[builtins.list[JobRecord], Writes | None]:
            cutoff = self._server_now(pipe).timestamp() - older_than
            found = cast(
                builtins.list[bytes],
                pipe.zrangebyscore(key, "-inf", cutoff, start=0, num=limit),
            )
            job_ids = [_text(job_id) for job_id in found]
            if not job_ids:
                return [], None
            jobs = pipe.mget([self._job_key(job_id) for job_id in job_ids])
            approvals = pipe.mget([self._approval_key(job_id) for job_id in job_ids])
            due: builtins.list[JobRecord] = []
            for raw_job, raw_approval in zip(jobs, approvals, strict=True):
                # A damaged document cannot be resumed: it leaves the index as stale.
                record = _maybe(_RECORD, raw_job, "a decided job's record")
                approval = _maybe(_APPROVAL, raw_approval, "a decided approval")
                if record is not None and _awaits_resume(record, approval):
                    due.append(record)
            stale = set(job_ids) - {record.id for record in due}
            if not stale:
                return due, None

            def writes(tx: Pipeline) -> None:
                tx.zrem(key, *stale)

            return due, writes

        # Watching the index: a decision made meanwhile (a job that parked again) reruns
        # the read, so a fresh entry is never dropped as stale.
        return self.atomic([key], body)

    def _backfill_decided(self) -> None:
        """Index the decided, unapplied approvals a release without the index recorded: one
        SCAN page of approval keys per call, resumed from the cursor kept in the store, so
        the first sweeps after an upgrade each cost one page, and later ones a GET."""
        marker = f"{self._prefix}:approvals:decided:backfill"
        with self.reachable():
            cursor = self._redis.get(marker)
            if cursor == b"done":
                return
            following, keys = self._redis.scan(
                int(cursor or 0),
                match=f"{_glob_escaped(self._prefix)}:approval:*",
                count=_BACKFILL_BATCH,
            )
            raws = self._redis.mget(keys) if keys else []
            decided = {
                approval.job_id: approval.decided_at.timestamp()
                for approval in _readable(_APPROVAL, (raw for raw in raws if raw), "an approval")
                if _unapplied_decision(approval) and approval.decided_at is not None
            }
            if decided:
                # NX: an entry a decision made since then wrote is newer; a stale one (the
                # job resumed meanwhile) leaves the index at the next sweep's read.
                self._redis.zadd(self._decided_key, decided, nx=True)
            self._redis.set(marker, "done" if int(following) == 0 else str(following))

    def list(self, **filters: Unpack[JobFilters]) -> tuple[builtins.list[JobRecord], str | None]:
        """``listing``'s jobs and cursor, for callers that show no unreadable ids."""
        found = self.listing(**filters)
        return found.records, found.next_cursor

    def listing(
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
        with self.reachable():
            for rows in self._index_pages(after, first=first):
                raws = self._redis.mget([self._job_key(job_id) for job_id, _ in rows])
                for (job_id, score), raw in zip(rows, raws, strict=True):
                    if raw is None:
                        continue
                    try:
                        record = _loaded(_RECORD, raw, f"job {job_id}'s record")
                    except JobError:
                        found.append((job_id, score, None))
                        continue
                    if wanted(record):
                        found.append((job_id, score, record))
                if len(found) > limit:
                    break
        page = found[:limit]
        listing = Listing(next_cursor=_encode_cursor(*page[-1][:2]) if len(found) > limit else None)
        for job_id, _, loaded in page:
            if loaded is None:
                listing.unreadable.append(job_id)
            else:
                listing.records.append(loaded)
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
                self._redis.zrevrangebyscore(
                    self._jobs_key, top, "-inf", start=offset, num=size, withscores=True
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

    # run state and snapshots -----------------------------------------------------------

    def save_run_state(self, job_id: str, state_json: str) -> None:
        with self.reachable():
            self._redis.set(self._run_key(job_id), state_json)

    def load_run_state(self, job_id: str) -> str:
        with self.reachable():
            raw = self._redis.get(self._run_key(job_id))
        if raw is None:
            raise JobError(
                "BEM-502", f"job {job_id} has no saved run state; it cannot resume (run it again)"
            )
        return _text(raw)

    def save_snapshot(self, job_id: str, data: bytes) -> None:
        if len(data) > self._snapshot_max_bytes:
            raise JobError(
                "BEM-503",
                f"the parked workspace of job {job_id} is {len(data)} bytes; the snapshot cap "
                f"is {self._snapshot_max_bytes} bytes (jobs.snapshot_max_bytes)",
            )
        with self.reachable():
            self._redis.set(self._snapshot_key(job_id), data)

    def load_snapshot(self, job_id: str) -> bytes | None:
        with self.reachable():
            raw = self._redis.get(self._snapshot_key(job_id))
        return None if raw is None else _bytes(raw)

    def drop_parked(self, job_id: str) -> None:
        with self.reachable():
            self._redis.delete(self._run_key(job_id), self._snapshot_key(job_id))

    # events ----------------------------------------------------------------------------

    def append_event(self, job_id: str, frame: Frame) -> str:
        return self._append(job_id, {"frame": frame_adapter.dump_json(frame).decode()})

    def end_events(self, job_id: str, state: JobState) -> str:
        """Write the end marker. Moving a job to a final state already writes it (in the same
        transaction), so followers never wait on a job that ended."""
        if not state.is_final:
            raise ValueError(f"{state.value} is not a final state")
        return self._append(job_id, {"end": state.value})

    def _append(self, job_id: str, fields: dict[str, str]) -> str:
        with self.reachable():
            entry: bytes = self._xadd(self._redis, job_id, fields)
        return entry.decode()

    def last_event_id(self, job_id: str) -> str:
        """The id of the newest event in the job's stream, "0-0" when it has none: where a
        follower that only wants what comes next starts."""
        with self.reachable():
            newest = cast(StreamEntries, self._redis.xrevrange(self._events_key(job_id), count=1))
        return _text(newest[0][0]) if newest else "0-0"

    def has_event(self, job_id: str, event_id: str) -> bool:
        """Whether the job's stream holds the event ``event_id`` (a full ``ms-seq`` id)."""
        with self.reachable():
            found = self._redis.xrange(self._events_key(job_id), event_id, event_id, count=1)
        return bool(found)

    def read_events(
        self, job_id: str, *, after: str = "0-0", block_ms: int | None = None, count: int = 200
    ) -> builtins.list[JobEvent]:
        """Up to ``count`` events after entry id ``after`` (``"$"``: only new ones). With
        ``block_ms`` the call waits up to that long for the first one (0: until one comes);
        an empty list means none arrived in time."""
        if not _STREAM_ID.fullmatch(after):
            raise JobError("BEM-501", f"{after!r} is not an event id (like 1700000000000-0)")
        if block_ms is not None and block_ms < 0:
            raise ValueError("block_ms must be 0 (wait until an event comes) or more")
        if count < 1:
            raise ValueError("count must be at least 1")
        key = self._events_key(job_id)
        deadline = None if not block_ms else time.monotonic() + block_ms / 1000
        # "$" means "after the newest entry now"; fix it once so the slices below do not
        # each skip what arrived in between.
        if after == "$":
            after = self.last_event_id(job_id)
        with self.reachable():
            while True:
                block = None
                if block_ms is not None:
                    left = BLOCK_SLICE_MS if deadline is None else deadline - time.monotonic()
                    block = max(1, min(BLOCK_SLICE_MS, int(left * 1000)))
                reply = cast(StreamReply, self._redis.xread({key: after}, count=count, block=block))
                if reply or block is None:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    return []
        return [_event(entry_id, fields) for _, entries in reply for entry_id, fields in entries]

    # approvals -------------------------------------------------------------------------

    def open_approval(self, approval: Approval) -> Approval:
        """Store the job's pending approval and queue it for reviewers. Opening the same
        approval again (a redelivered park) returns the stored one; a new one for the job
        replaces the previous current approval (which history already holds once decided)."""
        if approval.state is not ApprovalState.PENDING:
            raise ValueError("only a pending approval can be opened")
        key = self._approval_key(approval.job_id)

        def body(pipe: Pipeline) -> tuple[Approval, Writes | None]:
            self._read_job(pipe, approval.job_id)
            current = self._read_approval(pipe, approval.job_id)
            if current is not None and current.id == approval.id:
                return current, None

            def writes(tx: Pipeline) -> None:
                tx.set(key, approval.model_dump_json())
                tx.zadd(self._pending_key, {approval.job_id: approval.created_at.timestamp()})
                tx.hset(self._summaries_key, approval.job_id, _summary_json(approval))

            return approval, writes

        return self.atomic([key, self._job_key(approval.job_id)], body)

    def approval(self, job_id: str) -> Approval | None:
        """The job's current approval: pending, decided or withdrawn; None if it never had
        one."""
        with self.reachable():
            return self._read_approval(self._redis, job_id)

    def approval_history(self, job_id: str) -> builtins.list[Approval]:
        """Every approval of the job that was decided or withdrawn, oldest first, as it was
        at that moment."""
        with self.reachable():
            raws = self._redis.lrange(self._history_key(job_id), 0, -1)
        return _readable(_APPROVAL, raws, f"an approval of job {job_id}")

    def pending_approvals(self, *, repo: str | None = None) -> builtins.list[Approval]:
        """Approvals waiting for a decision, oldest first."""
        with self.reachable():
            job_ids = cast(builtins.list[bytes], self._redis.zrange(self._pending_key, 0, -1))
            if not job_ids:
                return []
            raws = self._redis.mget([self._approval_key(_text(job_id)) for job_id in job_ids])
        stored = [raw for raw in raws if raw is not None]
        approvals = _readable(_APPROVAL, stored, "a pending approval")
        return [
            approval
            for approval in approvals
            if approval.state is ApprovalState.PENDING and (repo is None or approval.repo == repo)
        ]

    def pending_summaries(
        self, *, limit: int, migrate: int = 50
    ) -> tuple[int, builtins.list[ApprovalSummary]]:
        """How many approvals wait, and the summaries of the oldest ``limit`` of them: three
        small reads (ZCARD, ZRANGE, HMGET) whatever their diffs weigh. An approval parked by
        a release that kept no summary gets one here, from its full document, once; at most
        ``migrate`` of them per call (oldest first), so the first call after an upgrade stays
        bounded too, and the rest are left out until a later call."""
        with self.reachable():
            waiting = int(self._redis.zcard(self._pending_key))
            found = cast(builtins.list[bytes], self._redis.zrange(self._pending_key, 0, limit - 1))
            job_ids = [_text(job_id) for job_id in found]
            raws = self._redis.hmget(self._summaries_key, job_ids) if job_ids else []
        summaries = []
        for job_id, raw in zip(job_ids, raws, strict=True):
            if raw is not None:
                summaries.append(_loaded(_SUMMARY, raw, f"job {job_id}'s approval summary"))
            elif migrate > 0:
                migrate -= 1
                summary = self._summarize_pending(job_id)
                if summary is not None:
                    summaries.append(summary)
        return waiting, summaries

    def _summarize_pending(self, job_id: str) -> ApprovalSummary | None:
        """Write the summary of the job's pending approval (one an earlier release opened);
        None when it is no longer pending."""
        key = self._approval_key(job_id)

        def body(pipe: Pipeline) -> tuple[ApprovalSummary | None, Writes | None]:
            approval = self._read_approval(pipe, job_id)
            if approval is None or approval.state is not ApprovalState.PENDING:
                return None, None
            summary = ApprovalSummary.of(approval)

            def writes(tx: Pipeline) -> None:
                tx.hset(self._summaries_key, job_id, summary.model_dump_json())

            return summary, writes

        # Watched: a decision in between (which drops the summary) reruns the read.
        return self.atomic([key], body)

    def decide(
        self,
        job_id: str,
        *,
        approve: bool,
        by: str,
        binding: DecisionBinding | None,
        comment: str = "",
        authorize: Callable[[JobRecord], bool] | None = None,
        os_user: str | None = None,
    ) -> tuple[Approval, JobRecord]:
        """Approve or refuse the job's pending call, once; returns the decision and the job
        as the transaction read it (the one read of the job a decision makes: the resume is
        sent from it). ``authorize(record)`` runs first, inside the transaction: it raises
        when the caller may not decide this job, else says whether its requester may approve
        it (without it: no). ``binding`` names the approval the person looked at. In the
        order checked: BEM-600 when nothing waits; BEM-604 when the binding is not the
        approval waiting (decided since, or the job parked again on another change); BEM-601
        when someone decided first; BEM-602 when the requester approves their own job and
        ``authorize`` does not allow it (refusing it is always allowed); BEM-605 for an
        approve that names nothing (a refuse may, since refusing releases nothing).
        ``os_user``: the OS account behind a CLI decision, recorded beside ``by`` and held to
        the same self-approval rule."""
        if not by:
            raise ValueError("a decision needs the name of who made it")
        key = self._approval_key(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[Approval, JobRecord], Writes | None]:
            record = self._read_job(pipe, job_id)
            allow_self = False if authorize is None else authorize(record)
            current = self._read_approval(pipe, job_id)
            if binding is not None and current is not None and binding.approval_id != current.id:
                raise _stale(job_id, binding, current)
            current = _decidable(record, current)
            if binding is not None and binding != current.binding():
                raise _stale(job_id, binding, current)
            if approve and not allow_self and current.requested_by in (by, os_user):
                raise ApprovalError(
                    "BEM-602",
                    f"{current.requested_by} requested job {job_id} and cannot approve it; "
                    "another reviewer must decide",
                )
            if approve and binding is None:
                raise ApprovalError(
                    "BEM-605",
                    f"an approve of job {job_id} must name what it approves: the approval "
                    "id, commit and diff digest you were shown. Look at the approval "
                    f"(`riverbeam approvals show {job_id}`, or GET /v1/approvals/{job_id}) "
                    "and send them with the decision",
                )
            decided = current.model_copy(
                update={
                    "state": ApprovalState.APPROVED if approve else ApprovalState.REFUSED,
                    "decided_by": by,
                    "decided_by_os_user": os_user,
                    "decided_at": self._server_now(pipe),
                    "comment": comment,
                }
            )

            def writes(tx: Pipeline) -> None:
                self._queue_decided(tx, decided)

            return (decided, record), writes

        return self.atomic([key, self._job_key(job_id)], body)

    def _queue_decided(self, tx: Pipeline, decided: Approval) -> None:
        tx.set(self._approval_key(decided.job_id), decided.model_dump_json())
        tx.zrem(self._pending_key, decided.job_id)
        tx.hdel(self._summaries_key, decided.job_id)
        tx.rpush(self._history_key(decided.job_id), decided.model_dump_json())
        if decided.state is not ApprovalState.WITHDRAWN and decided.decided_at is not None:
            # Until a resume claims it (claim_resume drops it): what the sweep for decisions
            # whose resume message was lost reads.
            tx.zadd(self._decided_key, {decided.job_id: decided.decided_at.timestamp()})

    def _queue_withdrawal(
        self, tx: Pipeline, approval: Approval, state: JobState, now: datetime
    ) -> None:
        withdrawn = approval.model_copy(
            update={
                "state": ApprovalState.WITHDRAWN,
                "decided_at": now,
                "comment": f"withdrawn: the job was {state.value} before anyone decided",
            }
        )
        self._queue_decided(tx, withdrawn)

    # schedules -------------------------------------------------------------------------

    def try_lock(self, name: str, *, ttl_seconds: float) -> str | None:
        """Take the lock ``name`` for ``ttl_seconds``; its token, or None when it is held."""
        token = secrets.token_hex(16)
        with self.reachable():
            taken = self._redis.set(
                self._lock_key(name), token, nx=True, px=max(1, int(ttl_seconds * 1000))
            )
        return token if taken else None

    def unlock(self, name: str, token: str) -> None:
        """Release the lock if ``token`` still holds it; a lock that expired and was taken by
        someone else stays theirs."""
        key = self._lock_key(name)

        def body(pipe: Pipeline) -> tuple[None, Writes | None]:
            if pipe.get(key) != token.encode():
                return None, None

            def writes(tx: Pipeline) -> None:
                tx.delete(key)

            return None, writes

        self.atomic([key], body)


def _check_moves(from_states: Collection[JobState], to: JobState) -> None:
    if not from_states:
        raise ValueError("from_states is empty")
    forbidden = sorted(state.value for state in from_states if to not in TRANSITIONS[state])
    if forbidden:
        raise ValueError(f"a job cannot move from {', '.join(forbidden)} to {to.value}")


def _decidable(record: JobRecord, current: Approval | None) -> Approval:
    """The approval a person may decide now, or the ApprovalError saying why not."""
    job_id = record.id
    if current is None:
        raise ApprovalError("BEM-600", f"job {job_id} has no approval waiting")
    if current.state is ApprovalState.WITHDRAWN:
        raise ApprovalError(
            "BEM-600", f"job {job_id}'s approval was withdrawn: the job is {record.state.value}"
        )
    if current.state is not ApprovalState.PENDING:
        when = current.decided_at.isoformat(timespec="seconds") if current.decided_at else "?"
        raise ApprovalError(
            "BEM-601",
            f"job {job_id}'s push was already {current.state.value} by "
            f"{current.decided_by} at {when}",
        )
    if record.state is not JobState.AWAITING_APPROVAL or record.approval_id != current.id:
        raise ApprovalError(
            "BEM-600",
            f"job {job_id} is {record.state.value}, not parked on this approval yet; "
            "try again in a moment",
        )
    return current


def _awaits_resume(record: JobRecord, approval: Approval | None) -> bool:
    """Whether the job is parked on ``approval``, decided and not yet applied: what a resume
    claims."""
    return (
        record.state is JobState.AWAITING_APPROVAL
        and approval is not None
        and approval.id == record.approval_id
        and _unapplied_decision(approval)
    )


def _unapplied_decision(approval: Approval) -> bool:
    """Whether a person decided ``approval`` and no resume has acted on it yet."""
    return (
        approval.state in (ApprovalState.APPROVED, ApprovalState.REFUSED) and not approval.applied
    )


def _glob_escaped(text: str) -> str:
    """``text`` matched literally in a SCAN pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _summary_json(approval: Approval) -> str:
    return ApprovalSummary.of(approval).model_dump_json()


def _stale(job_id: str, binding: DecisionBinding, current: Approval) -> ApprovalError:
    """BEM-604: the decision names something other than what waits; nothing is decided."""
    shown = current.binding()
    return ApprovalError(
        "BEM-604",
        f"job {job_id}'s current approval is {shown.approval_id} ({current.state.value}), "
        f"not what you decided ({'; '.join(binding.differences(shown))}); nothing was "
        "decided: look at the job's approval again and decide that one",
    )


def _event(entry_id: bytes, fields: dict[bytes, bytes]) -> JobEvent:
    """The stream entry as an event; one that cannot be read becomes a BEM-517 error frame
    in its place, so it never stops a stream or hides the entries after it."""
    event_id = entry_id.decode()
    try:
        if b"end" in fields:
            return JobEvent(id=event_id, end=JobState(fields[b"end"].decode()))
        return JobEvent(id=event_id, frame=_loaded(frame_adapter, fields[b"frame"], "an event"))
    except (KeyError, ValueError, JobError):
        log.warning("event %s cannot be read; it is shown as unreadable", event_id)
    message = f"event {event_id} cannot be read; it is skipped"
    return JobEvent(id=event_id, frame=ErrorFrame(error=ErrorInfo(code="BEM-517", message=message)))


def _loaded(adapter: TypeAdapter[T], raw: bytes | str, what: str) -> T:
    """A stored document, or BEM-516 naming it (never its content). Documents stored by an
    earlier release may nest deeper than pydantic's JSON parser goes (200 levels); Python's
    parser and pydantic's Python validation read those."""
    try:
        return adapter.validate_json(raw)
    except ValidationError:
        pass
    try:
        return adapter.validate_python(json.loads(raw))
    except (ValueError, RecursionError) as error:  # a ValidationError is a ValueError
        log.warning("%s cannot be read: %s", what, type(error).__name__)
    raise JobError("BEM-516", f"{what} cannot be read; it is damaged in the store")


def _maybe(adapter: TypeAdapter[T], raw: bytes | str | None, what: str) -> T | None:
    """The stored document, or None when there is none or it cannot be read (logged)."""
    if raw is None:
        return None
    try:
        return _loaded(adapter, raw, what)
    except JobError:
        return None


def _readable(adapter: TypeAdapter[T], raws: Iterable[bytes | str], what: str) -> builtins.list[T]:
    """The documents that can be read; the others are logged and left out."""
    documents = []
    for raw in raws:
        try:
            documents.append(_loaded(adapter, raw, what))
        except JobError:
            continue
    return documents


_RECORD: TypeAdapter[JobRecord] = TypeAdapter(JobRecord)
_APPROVAL: TypeAdapter[Approval] = TypeAdapter(Approval)
_SUMMARY: TypeAdapter[ApprovalSummary] = TypeAdapter(ApprovalSummary)


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

    records: builtins.list[JobRecord] = field(default_factory=builtins.list)
    next_cursor: str | None = None
    unreadable: builtins.list[str] = field(default_factory=builtins.list)


def _running(record: JobRecord, worker: str, now: datetime, lease_seconds: float) -> dict[str, Any]:
    """The fields that make ``worker`` the job's runner: a fresh lease, the next attempt. A
    push left under way was its previous worker's, lost mid-push: nobody pushes it now, so
    it must not hold off a cancel (BEM-512), and whether it landed is unknown."""
    return {
        "state": JobState.RUNNING,
        "worker": worker,
        "lease_until": now + timedelta(seconds=lease_seconds),
        "attempt": record.attempt + 1,
        "pushes": [_settled(push, now) for push in record.pushes],
    }


def _settled(push: UpstreamPush, now: datetime) -> UpstreamPush:
    """A push still under way when its job ends (its worker was lost mid-push): whether it
    reached the upstream is unknown, and the record says so rather than leave it pending."""
    if push.state is not PushState.UNDER_WAY:
        return push
    return push.model_copy(update={"state": PushState.UNKNOWN, "ended_at": now})


def _leased(record: JobRecord, now: datetime) -> bool:
    """Whether a worker holds the job: its lease has not run out."""
    return record.lease_until is not None and record.lease_until > now


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


def describe_redis(client: redis.Redis) -> str:
    """Where the client connects, for messages: host and port (or socket path), no user
    and no password."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _text(value: bytes | str) -> str:
    # The store's client never decodes (see __init__); str only satisfies redis-py's types.
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
