"""The job service: what the API, the web pages, the CLI and the scheduler do to jobs, once.

Every operation names who asks (a ``Principal``: a token holder, or an operator at the CLI)
and checks their role and scope before it acts:

- ``submit``: store the job, queue ``run_job`` on the kind's queue;
- ``decide``: record a person's decision, queue ``resume_job``;
- ``cancel``: a queued or parked job ends at once (its approval withdrawn); a running one is
  stopped by its worker at the next tool or model call;
- ``job``, ``jobs``, ``log``, ``approvals``, ``approval``, ``follow``: read.

A decision and a cancel read the job once, inside the store's transaction: the role, scope
and self-approval checks run there (``DeciderPolicy``), and the resume is sent from the record
the transaction read. No web framework here: the surfaces translate their requests.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from bot.config import RepositoryConfig, Settings
from bot.core import jsonlimits
from bot.core.errors import BeamError
from bot.service.access import Principal, TokenRegistry
from bot.service.follow import FollowItem, follow_events
from bot.service.queues import TaskQueues
from bot.service.schemas import JobRequest
from bot.store.models import (
    Approval,
    ApprovalState,
    DecisionBinding,
    JobEvent,
    JobKind,
    JobRecord,
    JobSpec,
    JobState,
    invalid_request,
)

if TYPE_CHECKING:
    # Only the type: the composition roots hand the service its store.
    from bot.store.listing import Listing
from bot.store.store import JobStore

MAX_IDEMPOTENCY_KEY_CHARS = 200
# Whether a person may decide an approval now ("yes"), or why not.
MayDecide = Literal["yes", "own", "role", "decided"]


@dataclass(frozen=True)
class DeciderPolicy:
    """What ``who`` may decide, asked inside the decision's transaction on the job it read:
    BEM-703 outside the caller's scope, BEM-702 for a role that may not decide; the job's
    requester may approve it when its repository allows it (``allow_self_approval``)."""

    who: Principal
    settings: Settings

    def check(self, record: JobRecord) -> None:
        self.who.check_decide(record.spec.repo)

    def allows_self_approval(self, record: JobRecord) -> bool:
        return self.settings.allows_self_approval(record.spec.repo)

    def allows_checks_override(self, record: JobRecord) -> bool:
        return self.who.role == "admin"


@dataclass(frozen=True)
class CancellerPolicy:
    """What ``who`` may cancel, asked inside the cancel's transaction on the job it read:
    BEM-703 outside the caller's scope, BEM-702 for a job neither theirs nor an admin's."""

    who: Principal

    def check(self, record: JobRecord) -> None:
        self.who.check_cancel(record)


@dataclass
class JobService:
    """What every surface shares: settings, the store, the task queues, the tokens.
    ``after_cancel(job_id)`` runs after a cancel ended a job at once: the composition roots
    wire it to remove a container left by a worker that died (it needs the Docker engine,
    which the service does not know)."""

    settings: Settings
    store: JobStore
    queues: TaskQueues
    tokens: TokenRegistry
    after_cancel: Callable[[str], None] | None = None

    # write ------------------------------------------------------------------------------

    def submit(
        self,
        who: Principal,
        request: JobRequest | JobSpec,
        *,
        idempotency_key: str | None = None,
    ) -> JobRecord:
        """Store a job for ``who`` and queue it. A repository outside their scope is
        BEM-703, one the configuration does not register BEM-501, and nothing is stored. A
        retry with the same idempotency key (per requester) returns the job the first call
        made, and makes none; while that job is still queued it is queued again, which
        costs nothing (a second ``run_job`` finds it claimed) and recovers a submit that died
        between the two steps. A ``JobSpec`` (the scheduler's) names ``who`` as requester."""
        who.check_submit(request.kind, request.repo)
        self._registered(request.repo)
        if isinstance(request, JobSpec):
            if request.requested_by != who.name:
                raise ValueError(f"{who.name} may not submit a job requested by someone else")
            spec = request
        else:
            try:
                spec = request.to_spec(requested_by=who.name)
            except ValidationError as error:
                raise invalid_request(error) from None
        try:
            jsonlimits.check(
                spec.metadata, what="metadata", max_bytes=jsonlimits.METADATA_MAX_BYTES
            )
        except jsonlimits.JsonLimitError as error:
            raise BeamError("BEM-501", f"invalid job request: {error}") from None
        key = None
        if idempotency_key is not None:
            key = f"{who.name}\n{_checked_key(idempotency_key)}"
        record = self.store.jobs.create(spec, idempotency_key=key)
        if record.state is JobState.QUEUED:
            self.queues.send_run(record)
        return record

    def decide(
        self,
        who: Principal,
        job_id: str,
        *,
        approve: bool,
        comment: str,
        binding: DecisionBinding | None,
        os_user: str | None = None,
        override_checks: bool = False,
    ) -> Approval:
        """Approve or refuse the approval ``binding`` names, as ``who``: reviewers and admins
        in scope only (BEM-702, BEM-703), never one's own job unless the repository allows it
        (BEM-602; the store's BEM-600 to 605 otherwise); then queue the resume that applies
        the decision on any worker. ``os_user``: the OS account behind a CLI decision,
        recorded beside ``who`` and held to the same self-approval rule."""
        decided, record = self.store.approvals.decide(
            job_id,
            approve=approve,
            by=who.name,
            binding=binding,
            comment=comment,
            os_user=os_user,
            policy=DeciderPolicy(who, self.settings),
            override_checks=override_checks,
        )
        self.queues.send_resume(record)
        return decided

    def cancel(self, who: Principal, job_id: str) -> JobRecord:
        """Cancel the job in whatever state it is: its requester or an admin, in scope. A
        queued or parked job is cancelled here and has no container; one found anyway (left
        by a worker that died) is removed by ``after_cancel``, else by the reaper of the host
        it runs on."""
        record = self.store.jobs.request_cancel(job_id, policy=CancellerPolicy(who))
        if record.state is JobState.CANCELLED and self.after_cancel is not None:
            self.after_cancel(job_id)
        return record

    # read -------------------------------------------------------------------------------

    def job(self, who: Principal, job_id: str) -> JobRecord:
        record = self.store.jobs.get(job_id)
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
        found = self.store.listing.page(
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
        while more := self.store.events.read(job_id, after=events[-1].id if events else after):
            events.extend(more)
        return record, events

    def follow(
        self, who: Principal, job_id: str, *, after: str, wait_ms: int, look_every: float
    ) -> Iterator[FollowItem]:
        """The job's events after entry ``after``, then those to come, until it ends
        (``bot.service.follow``). An unknown job, or one outside ``who``'s scope, raises
        here, before anything is read from its stream."""
        self.job(who, job_id)
        return follow_events(
            self.store, job_id, after=after, wait_ms=wait_ms, look_every=look_every
        )

    def approvals(self, who: Principal, *, repo: str | None = None) -> builtins.list[Approval]:
        """Pending approvals in the caller's scope, oldest first."""
        if repo is not None:
            who.check_repo(repo)
        return [a for a in self.store.approvals.pending(repo=repo) if who.sees(a.repo)]

    def approval(self, who: Principal, job_id: str) -> Approval:
        """The job's current approval (pending, decided or withdrawn)."""
        record = self.job(who, job_id)
        approval = self.store.approvals.get(record.id)
        if approval is None:
            raise BeamError("BEM-600", f"job {job_id} has never waited for an approval")
        return approval

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

    # checks -----------------------------------------------------------------------------

    def _registered(self, name: str) -> RepositoryConfig:
        """The one lookup of a request's repository (after its scope check): BEM-501 when
        the configuration does not register it."""
        config = self.settings.repositories.get(name)
        if config is None:
            known = ", ".join(sorted(self.settings.repositories)) or "none"
            raise BeamError(
                "BEM-501", f"invalid job request: no repository named {name!r} (known: {known})"
            )
        return config


def _checked_key(key: str) -> str:
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS or not key.isprintable():
        raise BeamError(
            "BEM-705",
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable characters",
        )
    return key
