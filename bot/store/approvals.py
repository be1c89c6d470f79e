"""``Approvals``: the approval that gates a parked job's push, from opening to the decision
(once, bound to what the person saw) and the resume that applies it. Pending approvals are
queued (``approvals:pending``) with a small summary each (``approvals:summaries``); decided
ones wait in ``approvals:decided`` until a resume claims them, so a lost resume message is
found by the sweep."""

from __future__ import annotations

from typing import Protocol, cast

from redis.client import Pipeline

from bot.core.errors import ApprovalError
from bot.store.gateway import RedisGateway, Writes, server_now, text
from bot.store.keys import every_key
from bot.store.models import (
    Approval,
    ApprovalState,
    ApprovalSummary,
    DecisionBinding,
    JobRecord,
    JobState,
)
from bot.store.records import (
    APPROVAL,
    RECORD,
    SUMMARY,
    awaits_resume,
    loaded,
    maybe,
    queue_decided,
    queue_pending,
    queue_status,
    read_approval,
    read_job,
    readable,
    unapplied_decision,
)


class DecisionPolicy(Protocol):
    """Who may decide a job: asked by ``decide`` inside its transaction, on the job it read
    (the job service's ``DeciderPolicy``)."""

    def check(self, record: JobRecord) -> None:
        """Raise when the caller may not decide ``record`` at all."""

    def allows_self_approval(self, record: JobRecord) -> bool:
        """Whether ``record``'s requester may approve it."""

    def allows_checks_override(self, record: JobRecord) -> bool:
        """Whether the caller may approve ``record`` over a blocking check failure."""


class Approvals:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def open(self, approval: Approval) -> Approval:
        """Store the job's pending approval and queue it for reviewers. Opening the same
        approval again (a redelivered park) returns the stored one; a new one for the job
        replaces the previous current approval (which history already holds once decided)."""
        if approval.state is not ApprovalState.PENDING:
            raise ValueError("only a pending approval can be opened")
        key = self._keys.approval(approval.job_id)

        def body(pipe: Pipeline) -> tuple[Approval, Writes | None]:
            read_job(pipe, self._keys, approval.job_id)
            current = read_approval(pipe, self._keys, approval.job_id)
            if current is not None and current.id == approval.id:
                return current, None

            def writes(tx: Pipeline) -> None:
                queue_pending(tx, self._keys, approval)

            return approval, writes

        return self._gateway.atomic([key, self._keys.job(approval.job_id)], body)

    def get(self, job_id: str) -> Approval | None:
        """The job's current approval: pending, decided or withdrawn; None if it never had
        one."""
        with self._gateway.reachable():
            return read_approval(self._gateway.client, self._keys, job_id)

    def history(self, job_id: str) -> list[Approval]:
        """Every approval of the job that was decided or withdrawn, oldest first, as it was
        at that moment."""
        with self._gateway.reachable():
            raws = self._gateway.client.lrange(self._keys.history(job_id), 0, -1)
        return readable(APPROVAL, raws, f"an approval of job {job_id}")

    def pending(self, *, repo: str | None = None) -> list[Approval]:
        """Approvals waiting for a decision, oldest first."""
        with self._gateway.reachable():
            job_ids = cast(list[bytes], self._gateway.client.zrange(self._keys.pending, 0, -1))
            if not job_ids:
                return []
            raws = self._gateway.client.mget(
                [self._keys.approval(text(job_id)) for job_id in job_ids]
            )
        stored = [raw for raw in raws if raw is not None]
        approvals = readable(APPROVAL, stored, "a pending approval")
        return [
            approval
            for approval in approvals
            if approval.state is ApprovalState.PENDING and (repo is None or approval.repo == repo)
        ]

    def pending_summaries(
        self, *, limit: int, migrate: int = 50
    ) -> tuple[int, list[ApprovalSummary]]:
        """How many approvals wait, and the summaries of the oldest ``limit`` of them: three
        small reads (ZCARD, ZRANGE, HMGET) whatever their diffs weigh. An approval parked by
        a release that kept no summary gets one here, from its full document, once; at most
        ``migrate`` of them per call (oldest first), so the first call after an upgrade stays
        bounded too, and the rest are left out until a later call."""
        with self._gateway.reachable():
            waiting = int(self._gateway.client.zcard(self._keys.pending))
            found = cast(list[bytes], self._gateway.client.zrange(self._keys.pending, 0, limit - 1))
            job_ids = [text(job_id) for job_id in found]
            raws = self._gateway.client.hmget(self._keys.summaries, job_ids) if job_ids else []
        summaries = []
        for job_id, raw in zip(job_ids, raws, strict=True):
            if raw is not None:
                summaries.append(loaded(SUMMARY, raw, f"job {job_id}'s approval summary"))
            elif migrate > 0:
                migrate -= 1
                summary = self._summarize_pending(job_id)
                if summary is not None:
                    summaries.append(summary)
        return waiting, summaries

    def _summarize_pending(self, job_id: str) -> ApprovalSummary | None:
        """Write the summary of the job's pending approval (one an earlier release opened);
        None when it is no longer pending."""
        key = self._keys.approval(job_id)

        def body(pipe: Pipeline) -> tuple[ApprovalSummary | None, Writes | None]:
            approval = read_approval(pipe, self._keys, job_id)
            if approval is None or approval.state is not ApprovalState.PENDING:
                return None, None
            summary = ApprovalSummary.of(approval)

            def writes(tx: Pipeline) -> None:
                tx.hset(self._keys.summaries, job_id, summary.model_dump_json())

            return summary, writes

        # Watched: a decision in between (which drops the summary) reruns the read.
        return self._gateway.atomic([key], body)

    def decide(
        self,
        job_id: str,
        *,
        approve: bool,
        by: str,
        binding: DecisionBinding | None,
        comment: str = "",
        policy: DecisionPolicy | None = None,
        os_user: str | None = None,
        override_checks: bool = False,
    ) -> tuple[Approval, JobRecord]:
        """Approve or refuse the job's pending call, once; returns the decision and the job
        as the transaction read it (the one read of the job a decision makes: the resume is
        sent from it). ``policy`` is asked first, inside the transaction: it raises when the
        caller may not decide this job, else says whether its requester may approve it
        (without a policy: no). ``binding`` names the approval the person looked at. In the
        order checked: BEM-600 when nothing waits; BEM-604 when the binding is not the
        approval waiting (decided since, or the job parked again on another change); BEM-601
        when someone decided first; BEM-602 when the requester approves their own job and
        ``policy`` does not allow it (refusing it is always allowed); BEM-605 for an
        approve that names nothing (a refuse may, since refusing releases nothing).
        ``os_user``: the OS account behind a CLI decision, recorded beside ``by`` and held to
        the same self-approval rule. BEM-606 for an approve of a change whose docs checks
        block it (``checks_block``), unless ``override_checks`` by a caller the policy allows
        (an admin): the override is recorded on the decision."""
        if not by:
            raise ValueError("a decision needs the name of who made it")
        key = self._keys.approval(job_id)

        def body(pipe: Pipeline) -> tuple[tuple[Approval, JobRecord], Writes | None]:
            record = read_job(pipe, self._keys, job_id)
            allow_self = False
            if policy is not None:
                policy.check(record)
                allow_self = policy.allows_self_approval(record)
            current = read_approval(pipe, self._keys, job_id)
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
            overridden = approve and _blocked_by_checks(current)
            if overridden:
                allowed = policy is not None and policy.allows_checks_override(record)
                if not (override_checks and allowed):
                    raise _checks_block(job_id, current, override_checks)
            decided = current.model_copy(
                update={
                    "checks_overridden_by": by if overridden else None,
                    "state": ApprovalState.APPROVED if approve else ApprovalState.REFUSED,
                    "decided_by": by,
                    "decided_by_os_user": os_user,
                    "decided_at": server_now(pipe),
                    "comment": comment,
                }
            )

            def writes(tx: Pipeline) -> None:
                queue_decided(tx, self._keys, decided)
                queue_status(tx, self._keys, record)

            return (decided, record), writes

        return self._gateway.atomic([key, self._keys.job(job_id)], body)

    def unapplied_decisions(self, *, older_than: float, limit: int = 100) -> list[JobRecord]:
        """Parked jobs whose approval was decided at least ``older_than`` seconds ago (the
        server's clock) and that no resume has claimed: their resume message was lost.
        Oldest decision first. Reads the index of decided approvals only, whatever the
        number of jobs; entries whose job moved on (resumed, cancelled) leave the index.
        Until decisions recorded before the index existed are all in it, each call also
        indexes one page of them (``_backfill_decided``)."""
        self._backfill_decided()
        key = self._keys.decided

        def body(pipe: Pipeline) -> tuple[list[JobRecord], Writes | None]:
            cutoff = server_now(pipe).timestamp() - older_than
            found = cast(list[bytes], pipe.zrangebyscore(key, "-inf", cutoff, start=0, num=limit))
            job_ids = [text(job_id) for job_id in found]
            if not job_ids:
                return [], None
            jobs = pipe.mget([self._keys.job(job_id) for job_id in job_ids])
            approvals = pipe.mget([self._keys.approval(job_id) for job_id in job_ids])
            due: list[JobRecord] = []
            for raw_job, raw_approval in zip(jobs, approvals, strict=True):
                # A damaged document cannot be resumed: it leaves the index as stale.
                record = maybe(RECORD, raw_job, "a decided job's record")
                approval = maybe(APPROVAL, raw_approval, "a decided approval")
                if record is not None and awaits_resume(record, approval):
                    due.append(record)
            stale = set(job_ids) - {record.id for record in due}
            if not stale:
                return due, None

            def writes(tx: Pipeline) -> None:
                tx.zrem(key, *stale)

            return due, writes

        # Watching the index: a decision made meanwhile (a job that parked again) reruns
        # the read, so a fresh entry is never dropped as stale.
        return self._gateway.atomic([key], body)

    def _backfill_decided(self) -> None:
        """Index the decided, unapplied approvals a release without the index recorded, one
        SCAN page of approval keys per call (``RedisGateway.backfill``)."""

        def index(raws: list[bytes]) -> None:
            decided = {
                approval.job_id: approval.decided_at.timestamp()
                for approval in readable(APPROVAL, raws, "an approval")
                if unapplied_decision(approval) and approval.decided_at is not None
            }
            if decided:
                # NX: an entry a decision made since then wrote is newer; a stale one (the
                # job resumed meanwhile) leaves the index at the next sweep's read.
                self._gateway.client.zadd(self._keys.decided, decided, nx=True)

        self._gateway.backfill(
            self._keys.decided_backfill, every_key(self._keys.approval("")), index
        )


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


def _stale(job_id: str, binding: DecisionBinding, current: Approval) -> ApprovalError:
    """BEM-604: the decision names something other than what waits; nothing is decided."""
    shown = current.binding()
    return ApprovalError(
        "BEM-604",
        f"job {job_id}'s current approval is {shown.approval_id} ({current.state.value}), "
        f"not what you decided ({'; '.join(binding.differences(shown))}); nothing was "
        "decided: look at the job's approval again and decide that one",
    )


def _blocked_by_checks(approval: Approval) -> bool:
    checks = approval.checks
    return approval.checks_block and checks is not None and not checks.clean


def _checks_block(job_id: str, approval: Approval, asked: bool) -> ApprovalError:
    checks = approval.checks
    failing = checks.failing if checks else []
    who = "only an admin may override it" if asked else "an admin may approve with the override"
    return ApprovalError(
        "BEM-606",
        f"job {job_id}'s change fails docs checks it did not fail before "
        f"({', '.join(failing)}) and the repository blocks such an approve; have the job fix "
        f"it, or {who} (`--override-checks`)",
    )
