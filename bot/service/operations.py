"""What the API and the web pages do, once: each operation checks the caller's role and
scope, then calls the job service (``bot.jobs.tasks``) and its store."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Literal

from celery import Celery
from pydantic import ValidationError

from bot.config import Settings
from bot.core.errors import BeamError
from bot.jobs.tasks import cancel_job, decide_job, submit_job
from bot.service.access import Principal, TokenRegistry
from bot.service.schemas import JobRequest
from bot.store.listing import Listing
from bot.store.models import (
    Approval,
    ApprovalState,
    DecisionBinding,
    JobEvent,
    JobKind,
    JobRecord,
    JobState,
    invalid_request,
)
from bot.store.store import JobStore

MAX_IDEMPOTENCY_KEY_CHARS = 200
# Whether a person may decide an approval now ("yes"), or why not.
MayDecide = Literal["yes", "own", "role", "decided"]


@dataclass
class Service:
    """What every request handler shares: settings, the store, the Celery app, the tokens."""

    settings: Settings
    store: JobStore
    celery: Celery
    tokens: TokenRegistry

    def submit(
        self, who: Principal, body: JobRequest, *, idempotency_key: str | None = None
    ) -> JobRecord:
        """Queue a job for ``who``. A retry with the same idempotency key (per token
        holder) returns the job the first call made, and makes none."""
        who.check_submit(body.kind, body.repo)
        try:
            spec = body.to_spec(requested_by=who.name)
        except ValidationError as error:
            raise invalid_request(error) from None
        key = None
        if idempotency_key is not None:
            key = f"{who.name}\n{_checked_key(idempotency_key)}"
        return submit_job(
            self.store, spec, settings=self.settings, idempotency_key=key, app=self.celery
        )

    def job(self, who: Principal, job_id: str) -> JobRecord:
        record = self.store.get(job_id)
        who.check_repo(record.spec.repo)
        return record

    def jobs(
        self,
        who: Principal,
        *,
        state: JobState | None = None,
        kind: JobKind | None = None,
        repo: str | None = None,
        requested_by: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """A page of the jobs ``who`` may see. Records that cannot be read are named under
        ``unreadable`` for a token limited to no repository only: whose they are is unknown."""
        if repo is not None:
            who.check_repo(repo)
        found = self.store.listing(
            state=state,
            kind=kind,
            repo=repo,
            requested_by=requested_by,
            repos=who.repos,
            cursor=cursor,
            limit=limit,
        )
        if who.repos is not None:
            found.unreadable.clear()
        return found

    def log(
        self, who: Principal, job_id: str, *, after: str = "0"
    ) -> tuple[JobRecord, builtins.list[JobEvent]]:
        """The job and every event stored after entry ``after``, read a page at a time;
        the scope is checked once, not per page."""
        record = self.job(who, job_id)
        events: builtins.list[JobEvent] = []
        while more := self.store.read_events(job_id, after=events[-1].id if events else after):
            events.extend(more)
        return record, events

    def cancel(self, who: Principal, job_id: str) -> JobRecord:
        who.check_cancel(self.store.get(job_id))
        return cancel_job(self.store, job_id)

    def approvals(self, who: Principal, *, repo: str | None = None) -> builtins.list[Approval]:
        """Pending approvals in the caller's scope, oldest first."""
        if repo is not None:
            who.check_repo(repo)
        return [a for a in self.store.pending_approvals(repo=repo) if who.sees(a.repo)]

    def approval(self, who: Principal, job_id: str) -> Approval:
        """The job's current approval (pending, decided or withdrawn)."""
        record = self.job(who, job_id)
        approval = self.store.approval(record.id)
        if approval is None:
            raise BeamError("BEM-600", f"job {job_id} has never waited for an approval")
        return approval

    def decide(
        self,
        who: Principal,
        job_id: str,
        *,
        approve: bool,
        comment: str,
        binding: DecisionBinding | None,
    ) -> Approval:
        """Approve or refuse the approval ``binding`` names, as ``who``: reviewers and admins
        only, never one's own job unless the repository allows it; the resume is queued."""
        who.check_decide(self.store.get(job_id).spec.repo)
        return decide_job(
            self.store,
            job_id,
            approve,
            who.name,
            comment,
            binding=binding,
            settings=self.settings,
            app=self.celery,
        )

    def may_decide(self, who: Principal, approval: Approval) -> MayDecide:
        """Whether ``who`` may decide ``approval`` now ("yes"), or why not: it is no longer
        pending, their role may not decide, or it is their own job and its repository does
        not allow self-approval. ``decide`` checks again; this only lets a page offer the
        decision where it can succeed."""
        if approval.state is not ApprovalState.PENDING:
            return "decided"
        if not who.may_decide:
            return "role"
        if approval.requested_by == who.name and not self.settings.allows_self_approval(
            approval.repo
        ):
            return "own"
        return "yes"


def _checked_key(key: str) -> str:
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS or not key.isprintable():
        raise BeamError(
            "BEM-705",
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable characters",
        )
    return key
