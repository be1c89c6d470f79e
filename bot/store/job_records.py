"""``JobRecords``: creating a job and every move of its record, each an optimistic
transaction, so two workers can never both move a job. ``change_job`` is the one write path:
when a job ends it also writes the end event and withdraws the pending approval, in the same
transaction. A running job's cancel flag (``<prefix>:cancel:<id>``) mirrors its record's
``cancel_requested``, so the check before every call is one EXISTS."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from redis import Redis
from redis.client import Pipeline

from bot.core.errors import BeamError, JobError
from bot.core.frames import ErrorInfo
from bot.store.gateway import RedisGateway, Writes, server_now, text
from bot.store.keys import every_key
from bot.store.models import (
    MAX_GIVEN_UP,
    TRANSITIONS,
    Approval,
    ApprovalState,
    JobRecord,
    JobSpec,
    JobState,
    OutboxEntry,
    PushState,
    UpstreamPush,
)
from bot.store.records import (
    RECORD,
    append_entry,
    awaits_resume,
    check_snapshot,
    index_lease,
    loaded,
    queue_delivery,
    queue_pending,
    queue_status,
    queue_withdrawal,
    read_approval,
    read_job,
    readable,
)

IDEMPOTENCY_TTL_SECONDS = 24 * 3600
# Fields of a JobRecord that only the store sets.
_STORE_FIELDS = frozenset({"id", "spec", "state", "version", "created_at", "updated_at"})

# ``change(record, now)``: the fields to set, or None to leave the job as it is.
Change = Callable[[JobRecord, datetime], dict[str, Any] | None]


class CancelPolicy(Protocol):
    """Who may cancel a job: asked by ``request_cancel`` inside its transaction, on the job
    it read (the job service's ``CancellerPolicy``)."""

    def check(self, record: JobRecord) -> None:
        """Raise when the caller may not cancel ``record``."""


class JobRecords:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def create(self, spec: JobSpec, *, idempotency_key: str | None = None) -> JobRecord:
        """Store a new queued job. With an ``idempotency_key`` seen in the last 24 hours,
        the job created then comes back and nothing new is stored; reusing a key for a
        different request is BEM-501."""
        idem = None if idempotency_key is None else self._keys.idem(idempotency_key)

        def body(pipe: Pipeline) -> tuple[JobRecord, Writes | None]:
            if idem is not None:
                existing = pipe.get(idem)
                if existing is not None:
                    return self._same_request(pipe, text(existing), spec), None
            job_id = self._fresh_id(pipe)
            now = server_now(pipe)
            record = JobRecord(id=job_id, spec=spec, created_at=now, updated_at=now)

            def writes(tx: Pipeline) -> None:
                tx.set(self._keys.job(job_id), record.model_dump_json())
                tx.zadd(self._keys.jobs, {job_id: now.timestamp()})
                queue_status(tx, self._keys, record)
                if idem is not None:
                    tx.set(idem, job_id, ex=IDEMPOTENCY_TTL_SECONDS)

            return record, writes

        return self._gateway.atomic([idem] if idem else [], body)

    def _fresh_id(self, pipe: Pipeline) -> str:
        """A new job id, watched so that a concurrent create of the same id fails ours. Ids
        are 48 random bits: short enough for branch names, and a collision draws again."""
        while True:
            job_id = uuid.uuid4().hex[:12]
            pipe.watch(self._keys.job(job_id))  # type: ignore[no-untyped-call]
            if not pipe.exists(self._keys.job(job_id)):
                return job_id

    def _same_request(self, pipe: Pipeline, job_id: str, spec: JobSpec) -> JobRecord:
        record = read_job(pipe, self._keys, job_id)
        if record.spec != spec:
            raise JobError(
                "BEM-501",
                f"the idempotency key was already used for job {job_id} with a different "
                "request; use a new key for a new job",
            )
        return record

    def get(self, job_id: str) -> JobRecord:
        with self._gateway.reachable():
            return read_job(self._gateway.client, self._keys, job_id)

    def find(self, job_id: str) -> JobRecord | None:
        """The job, or None when the store does not know it (``get`` says BEM-500)."""
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._keys.job(job_id))
        return None if raw is None else loaded(RECORD, raw, f"job {job_id}'s record")

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

        return self.change_job(job_id, change)[0]

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

        return self.change_job(job_id, change)[0]

    def claim_resume(
        self, job_id: str, *, worker: str, lease_seconds: float
    ) -> tuple[JobRecord, Approval] | None:
        """Take a parked job whose approval is decided and not yet applied: the job goes to
        running under ``worker`` and the approval is marked applied, in one transaction, so
        exactly one resume acts on a decision. A job still waiting for a person, or whose
        decision another resume already took, is None: the task does nothing."""
        job_key, approval_key = self._keys.job(job_id), self._keys.approval(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[JobRecord, Approval] | None, Writes | None]:
            record = read_job(pipe, self._keys, job_id)
            approval = read_approval(pipe, self._keys, job_id)
            if approval is None or not awaits_resume(record, approval):
                return None, None
            now = server_now(pipe)
            running = _running(record, worker, now, lease_seconds)
            claimed = record.model_copy(
                update={**running, "version": record.version + 1, "updated_at": now}
            )
            applied = approval.model_copy(update={"applied": True})

            def writes(tx: Pipeline) -> None:
                tx.set(job_key, claimed.model_dump_json())
                tx.set(approval_key, applied.model_dump_json())
                tx.zrem(self._keys.decided, job_id)
                index_lease(tx, self._keys, claimed)
                queue_status(tx, self._keys, claimed)

            return (claimed, applied), writes

        return self._gateway.atomic([job_key, approval_key], body)

    def park(
        self,
        approval: Approval,
        *,
        owner: str,
        run_state: str,
        snapshot: bytes | None,
        deliveries: Sequence[OutboxEntry] = (),
        **changes: Any,
    ) -> JobRecord | None:
        """Park the job ``owner`` runs on its pending ``approval``, in ONE transaction: the
        run state, the workspace snapshot (if any), the approval queued for reviewers, the
        ``deliveries`` that announce it (the outbox) and the move to ``awaiting_approval``
        (with ``changes``) are written together, or none of them is (a worker killed
        meanwhile leaves the job running, for the sweep). None
        when the job is no longer ``owner``'s running job: nothing is written."""
        if approval.state is not ApprovalState.PENDING:
            raise ValueError("only a pending approval can be opened")
        job_id = approval.job_id
        if snapshot is not None:
            check_snapshot(job_id, snapshot, self._gateway.snapshot_max_bytes)

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if record.state is not JobState.RUNNING or record.worker != owner:
                return None
            return {**changes, "state": JobState.AWAITING_APPROVAL, "approval_id": approval.id}

        def parked(tx: Pipeline) -> None:
            tx.set(self._keys.run(job_id), run_state)
            if snapshot is not None:
                tx.set(self._keys.snapshot(job_id), snapshot)
            queue_pending(tx, self._keys, approval)
            for entry in deliveries:
                queue_delivery(tx, self._keys, entry)

        return self.change_job(job_id, change, also=parked)[0]

    def request_cancel(self, job_id: str, *, policy: CancelPolicy | None = None) -> JobRecord:
        """Ask for the job to stop; ``policy.check(record)`` runs first, inside the
        transaction, and raises when the caller may not cancel it (no policy: the system's
        own cancel, which may). A job no worker holds (queued, parked,
        or running under a lease that ran out) is cancelled at once, its pending approval
        withdrawn; a running one gets ``cancel_requested`` and its worker ends it between tool
        calls; a final job comes back unchanged. While its worker pushes upstream, BEM-512:
        the push cannot be called back, and a cancel then would end the job saying nothing
        went out."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            if policy is not None:
                policy.check(record)
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

        new, current = self.change_job(job_id, change)
        return current if new is None else new

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel of the running job was asked for: one EXISTS of its cancel flag,
        no document read, for the check before every model and tool call. A cancel an
        earlier release asked for is in the record only: the lease renewal reads it there
        (``renew_lease_record``), and the recovery sweep sets its flag
        (``backfill_cancel_flags``)."""
        with self._gateway.reachable():
            return bool(self._gateway.client.exists(self._keys.cancel(job_id)))

    def _flag_cancel(self, target: Redis | Pipeline, job_id: str, *, nx: bool = False) -> None:
        ttl_ms = max(1, round(self._gateway.cancel_ttl_seconds * 1000))
        target.set(self._keys.cancel(job_id), "1", px=ttl_ms, nx=nx)

    def backfill_cancel_flags(self) -> None:
        """Set the cancel flag of the jobs still going whose cancel a release without the
        flag asked for: one SCAN page of job keys per call (``RedisGateway.backfill``). NX:
        a flag already there stays as it is."""

        def flag(raws: list[bytes]) -> None:
            for record in readable(RECORD, raws, "a job's record"):
                if record.cancel_requested and not record.state.is_final:
                    self._flag_cancel(self._gateway.client, record.id, nx=True)

        self._gateway.backfill(self._keys.cancel_backfill, every_key(self._keys.job("")), flag)

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

        self.change_job(job_id, change)

    def end_push(
        self,
        job_id: str,
        *,
        worker: str,
        already_there: bool = False,
        error: ErrorInfo | None = None,
        deliveries: Sequence[OutboxEntry] = (),
    ) -> None:
        """Record how the push ``begin_push`` started ended: landed, with ``deliveries``
        queued in the outbox in the same transaction, or failed with ``error``. A job that is
        no longer ``worker``'s is left alone (whoever holds it now pushes again, and the
        relay finds the commit there)."""

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

        def queued(tx: Pipeline) -> None:
            for entry in deliveries if error is None else ():
                queue_delivery(tx, self._keys, entry)

        self.change_job(job_id, change, also=queued)

    def record_given_up_post(self, job_id: str, error: ErrorInfo) -> None:
        """Keep on the job that a post outside for it was given up (the last
        ``MAX_GIVEN_UP``), so whoever reads the job sees it; a job gone by then is left
        alone."""

        def change(record: JobRecord, now: datetime) -> dict[str, Any] | None:
            return {"posts_given_up": [*record.posts_given_up, error][-MAX_GIVEN_UP:]}

        if self.find(job_id) is not None:
            self.change_job(job_id, change)

    def change_job(
        self, job_id: str, change: Change, *, also: Writes | None = None
    ) -> tuple[JobRecord | None, JobRecord]:
        """The one write path for a job: ``change`` returns the fields to set (or None to
        leave the job as it is); the store adds version and updated_at, drops the lease when
        the job stops running, and when the job ends writes the end event and withdraws its
        pending approval in the same transaction; ``also`` queues what goes with the change
        (a park's run state, snapshot and approval) in that transaction too. The cancel flag
        follows the record's ``cancel_requested``: set when a cancel is asked of a job that
        goes on running, deleted when the job ends. Returns (written record or None, record
        as read)."""
        job_key, approval_key = self._keys.job(job_id), self._keys.approval(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[JobRecord | None, JobRecord], Writes | None]:
            record = read_job(pipe, self._keys, job_id)
            now = server_now(pipe)
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
            approval = read_approval(pipe, self._keys, job_id) if ends else None

            def writes(tx: Pipeline) -> None:
                if also is not None:
                    also(tx)
                tx.set(job_key, new.model_dump_json())
                index_lease(tx, self._keys, new)
                if new.state is not record.state or new.pushes != record.pushes:
                    queue_status(tx, self._keys, new)
                if ends:
                    end = {"end": new.state.value}
                    append_entry(tx, self._keys, job_id, end, maxlen=self._gateway.events_maxlen)
                    tx.delete(self._keys.cancel(job_id))
                elif new.cancel_requested and not record.cancel_requested:
                    self._flag_cancel(tx, job_id)
                if approval is not None and approval.state is ApprovalState.PENDING:
                    queue_withdrawal(tx, self._keys, approval, new.state, now)

            return (new, record), writes

        return self._gateway.atomic([job_key, approval_key], body)


def _check_moves(from_states: Collection[JobState], to: JobState) -> None:
    if not from_states:
        raise ValueError("from_states is empty")
    forbidden = sorted(state.value for state in from_states if to not in TRANSITIONS[state])
    if forbidden:
        raise ValueError(f"a job cannot move from {', '.join(forbidden)} to {to.value}")


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
