"""Reading and writing the stored documents inside a transaction, shared by the concepts
whose transactions touch more than their own keys: a job that ends writes its end event and
withdraws its approval, a decision and a resume read the job and its approval together.
These functions run on a pipeline someone else opened; none starts a transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

import redis
from pydantic import TypeAdapter, ValidationError
from redis.client import Pipeline

from bot.core.errors import JobError
from bot.store.keys import Keys
from bot.store.models import (
    Approval,
    ApprovalState,
    ApprovalSummary,
    ForgeThreadRef,
    JobRecord,
    JobState,
    OutboxEntry,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

RECORD: TypeAdapter[JobRecord] = TypeAdapter(JobRecord)
APPROVAL: TypeAdapter[Approval] = TypeAdapter(Approval)
SUMMARY: TypeAdapter[ApprovalSummary] = TypeAdapter(ApprovalSummary)


def loaded(adapter: TypeAdapter[T], raw: bytes | str, what: str) -> T:
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


def maybe(adapter: TypeAdapter[T], raw: bytes | str | None, what: str) -> T | None:
    """The stored document, or None when there is none or it cannot be read (logged)."""
    if raw is None:
        return None
    try:
        return loaded(adapter, raw, what)
    except JobError:
        return None


def readable(adapter: TypeAdapter[T], raws: Iterable[bytes | str], what: str) -> list[T]:
    """The documents that can be read; the others are logged and left out."""
    documents = []
    for raw in raws:
        try:
            documents.append(loaded(adapter, raw, what))
        except JobError:
            continue
    return documents


def read_job(pipe: redis.Redis, keys: Keys, job_id: str) -> JobRecord:
    raw = pipe.get(keys.job(job_id))
    if raw is None:
        raise JobError("BEM-500", f"no job with id {job_id!r}")
    return loaded(RECORD, raw, f"job {job_id}'s record")


def read_approval(pipe: redis.Redis, keys: Keys, job_id: str) -> Approval | None:
    raw = pipe.get(keys.approval(job_id))
    return None if raw is None else loaded(APPROVAL, raw, f"job {job_id}'s approval")


def append_entry(
    target: redis.Redis, keys: Keys, job_id: str, fields: dict[str, str], *, maxlen: int
) -> Any:
    """Append to the job's event stream, trimmed to about ``maxlen`` entries (``~`` lets
    Redis trim whole nodes, which is much cheaper than an exact cap)."""
    return target.xadd(
        keys.events(job_id),
        dict(fields),  # type: ignore[arg-type]  # redis-py's field type is invariant
        maxlen=maxlen,
        approximate=True,
    )


def index_lease(tx: Pipeline, keys: Keys, record: JobRecord) -> None:
    """Keep the lease index in step with the record: a running job is there under its
    lease's end, any other job is not."""
    if record.state is JobState.RUNNING and record.lease_until is not None:
        tx.zadd(keys.leases, {record.id: record.lease_until.timestamp()})
    else:
        tx.zrem(keys.leases, record.id)


def queue_pending(tx: Pipeline, keys: Keys, approval: Approval) -> None:
    """Store a job's pending approval and queue it, with its summary, for reviewers."""
    tx.set(keys.approval(approval.job_id), approval.model_dump_json())
    tx.zadd(keys.pending, {approval.job_id: approval.created_at.timestamp()})
    tx.hset(keys.summaries, approval.job_id, ApprovalSummary.of(approval).model_dump_json())


def check_snapshot(job_id: str, data: bytes, cap: int) -> None:
    """BEM-503 when a parked workspace's snapshot is over the cap."""
    if len(data) > cap:
        raise JobError(
            "BEM-503",
            f"the parked workspace of job {job_id} is {len(data)} bytes; the snapshot cap "
            f"is {cap} bytes (jobs.snapshot_max_bytes)",
        )


def queue_decided(tx: Pipeline, keys: Keys, decided: Approval) -> None:
    """Store an approval that left pending: out of the queue, into the history."""
    tx.set(keys.approval(decided.job_id), decided.model_dump_json())
    tx.zrem(keys.pending, decided.job_id)
    tx.hdel(keys.summaries, decided.job_id)
    tx.rpush(keys.history(decided.job_id), decided.model_dump_json())
    if decided.state is not ApprovalState.WITHDRAWN and decided.decided_at is not None:
        # Until a resume claims it (claim_resume drops it): what the sweep for decisions
        # whose resume message was lost reads.
        tx.zadd(keys.decided, {decided.job_id: decided.decided_at.timestamp()})


def queue_withdrawal(
    tx: Pipeline, keys: Keys, approval: Approval, state: JobState, now: datetime
) -> None:
    withdrawn = approval.model_copy(
        update={
            "state": ApprovalState.WITHDRAWN,
            "decided_at": now,
            "comment": f"withdrawn: the job was {state.value} before anyone decided",
        }
    )
    queue_decided(tx, keys, withdrawn)


def awaits_resume(record: JobRecord, approval: Approval | None) -> bool:
    """Whether the job is parked on ``approval``, decided and not yet applied: what a resume
    claims."""
    return (
        record.state is JobState.AWAITING_APPROVAL
        and approval is not None
        and approval.id == record.approval_id
        and unapplied_decision(approval)
    )


def unapplied_decision(approval: Approval) -> bool:
    """Whether a person decided ``approval`` and no resume has acted on it yet."""
    return (
        approval.state in (ApprovalState.APPROVED, ApprovalState.REFUSED) and not approval.applied
    )


def queue_delivery(tx: Pipeline, keys: Keys, entry: OutboxEntry) -> None:
    """Put ``entry`` in the outbox, due at once (``bot.store.outgoing``)."""
    tx.set(keys.outbox(entry.id), entry.model_dump_json())
    tx.zadd(keys.outbox_due, {entry.id: 0})


def status_entry_id(job_id: str) -> str:
    """The one outbox entry of a job's status comment: its id follows from the job's."""
    return hashlib.sha256(f"forge-status:{job_id}".encode()).hexdigest()[:32]


def queue_status(tx: Pipeline, keys: Keys, record: JobRecord) -> None:
    """For a job that came from a forge thread, its status comment to be brought in line
    with ``record`` (nothing for any other job). One entry per job however many changes
    come before it is delivered: each change gives it a new revision, and the delivery
    renders the job as it stands then. An entry a worker holds keeps its lease
    (``NX``); its delivery, finding a newer revision, makes it due again (``Outbox``)."""
    target = ForgeThreadRef.of_job(record.spec)
    if target is None:
        return
    entry = OutboxEntry(
        id=status_entry_id(record.id),
        channel="forge_status",
        repo=record.spec.repo,
        forge=target,
        job_id=record.id,
        event="forge.status",
        payload={"revision": uuid.uuid4().hex},
        created_at=record.updated_at,
    )
    tx.set(keys.outbox(entry.id), entry.model_dump_json())
    tx.zadd(keys.outbox_due, {entry.id: 0}, nx=True)
