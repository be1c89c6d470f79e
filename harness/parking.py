"""A job parked on an approval without running anything: the store writes the executor
makes when a push needs a person (claim, open the approval, park), for tests of what comes
after (deciding, cancelling) that need no worker, container or model."""

from __future__ import annotations

from bot.store.models import Approval, JobRecord, JobSpec, JobState
from bot.store.store import JobStore


def park(store: JobStore, spec: JobSpec, *, worker: str = "parking@test") -> Approval:
    """Store a job for ``spec`` and park it on a pending push approval; the approval."""
    record = store.jobs.create(spec)
    assert store.jobs.claim(record.id, worker=worker, lease_seconds=30) is not None
    approval = pending_for(record, f"ap-{record.id}")
    park_on(store, approval)
    return approval


def pending_for(record: JobRecord, approval_id: str = "ap1") -> Approval:
    """A pending approval of a push of ``record``'s branch, as the executor opens one."""
    return Approval(
        id=approval_id,
        job_id=record.id,
        repo=record.spec.repo,
        requested_by=record.spec.requested_by,
        call_id="call-1",
        tool="git_push",
        arguments={"branch": f"riverbeam/{record.id}"},
        commit_sha="a" * 40,
        target_ref=f"riverbeam/{record.id}",
        diff_digest="d" * 64,
        diff="--- a/install.md\n+++ b/install.md\n",
    )


def park_on(store: JobStore, approval: Approval) -> JobRecord:
    """The running job opens ``approval`` and parks on it."""
    store.approvals.open(approval)
    moved = store.jobs.transition(
        approval.job_id,
        JobState.AWAITING_APPROVAL,
        from_states={JobState.RUNNING},
        approval_id=approval.id,
    )
    assert moved is not None
    return moved
