"""``publish_docset``: move a repository's publish branch to the commit a review approved.

The call is ``confirm_required``: the run parks, a person approves, and only then does it
run. What it publishes is fixed by the job, never by the model: the commit is the one the
publish job's ``review_job`` reviewed, and the destination is the repository's configured
``publish_ref``. Before anything moves, the review must be a succeeded review job of the
same repository whose verdict approves (BEM-360), and the publish ref must be configured and
not protected (BEM-361). The push itself is ``sandbox.host.relay.publish_commit``: the
relay's one pushing path, fast-forward only, idempotent (``already_there``), the protected
refs checked again there. The mirror is fetched first: a publish may run hours after the job
parked, and the relay can only prove a fast-forward against an upstream tip it holds.

After a publish, ``docs_build_webhook`` (when configured) receives a JSON POST. Delivery is
at least once: a repeated publish of the same commit notifies again, and the payload carries
the job and the commit so that a receiver can tell. A failed notification (no answer, or a
status other than 2xx) is BEM-362 in the result, but the publish stays done: the branch has
moved and readers see it, so reporting the publish as failed would be false.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

from bot.config import RepositoryConfig, Settings, WorkspaceSettings
from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, json_params, validate_arguments
from bot.jobs.relayed_push import PushGuard, unrecorded
from bot.jobs.webhooks import post_json, public_webhook_url
from bot.store.models import JobKind, JobRecord, JobState, PublishOutcome, ReviewOutcome
from sandbox.host.relay import publish_commit
from sandbox.host.upstream.credentials import UpstreamCallbacks, upstream_callbacks
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.inside.refs import ProtectedRefs, branch_name, full_ref

__all__ = ["PublishDocsetTool", "PublishPlan", "WebhookReport", "notify_webhook"]

APPROVING = frozenset({"approve", "approve_with_suggestions"})
MAX_NOTE_CHARS = 500

JobLookup = Callable[[str], JobRecord]


class PublishPlan(BaseModel):
    """What a publish would do, once every check passed: the executor binds the approval
    to it (``sha`` as the commit, ``publish_ref`` as the target ref)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repository: str
    job: str
    review_job: str
    reviewed_branch: str
    verdict: str
    sha: str
    publish_ref: str


class WebhookReport(BaseModel):
    """How the docs-build notification went. ``url`` is shown without credentials or query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    delivered: bool
    status: int | None = None
    error: ErrorInfo | None = None


class PublishDocsetTool:
    """The ``publish_docset`` host tool of one publish job.

    ``lookup`` finds a job by id (``store.jobs.get``); ``workspaces`` locate the repository's
    mirror; ``callbacks`` carry the upstream credentials. After a successful call,
    ``outcome`` and ``webhook`` say what happened.
    """

    def __init__(
        self,
        job: JobRecord,
        repo_config: RepositoryConfig,
        *,
        lookup: JobLookup,
        workspaces: WorkspaceSettings,
        callbacks: UpstreamCallbacks,
        webhook_timeout: float = 10.0,
        guard: PushGuard = unrecorded,
    ) -> None:
        if job.spec.kind is not JobKind.PUBLISH or not job.spec.review_job:
            raise ValueError(f"job {job.id} is not a publish job with a review_job")
        self._job = job
        self._review_job = job.spec.review_job
        self._repo_config = repo_config
        self._lookup = lookup
        self._workspaces = workspaces
        self._callbacks = callbacks
        self._webhook_timeout = webhook_timeout
        self._guard = guard
        self.outcome: PublishOutcome | None = None
        self.webhook: WebhookReport | None = None

    @classmethod
    def for_job(
        cls,
        job: JobRecord,
        settings: Settings,
        *,
        lookup: JobLookup,
        callbacks: UpstreamCallbacks | None = None,
        guard: PushGuard = unrecorded,
    ) -> PublishDocsetTool:
        """The tool for ``job`` with everything else taken from ``settings``."""
        repo_config = settings.repository(job.spec.repo)
        return cls(
            job,
            repo_config,
            lookup=lookup,
            workspaces=settings.workspaces,
            callbacks=callbacks
            or upstream_callbacks(job.spec.repo, repo_config, settings.workspaces),
            webhook_timeout=settings.jobs.webhook_timeout_seconds,
            guard=guard,
        )

    def __repr__(self) -> str:
        return f"PublishDocsetTool(job={self._job.id!r}, review_job={self._review_job!r})"

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="publish_docset",
            description=(
                "Publish this job's reviewed docset: move the repository's publish branch to "
                "the commit that this job's review approved (fast-forward only; the branch is "
                "created if it does not exist yet), then notify the docs build. It takes no "
                "ref or destination: the job fixes both. A person approves the call before it "
                "runs. Returns published=true with publish_ref, sha, already_there (true when "
                "the branch was already at that commit: nothing was pushed) and 'webhook'. "
                "Errors: BEM-360 the review does not approve (not a succeeded review of this "
                "repository, or its verdict is request_changes); BEM-361 no publish ref is "
                "configured or it is protected; BEM-351 the publish branch holds commits the "
                "reviewed commit lacks; BEM-363 the reviewed commit is gone upstream; BEM-340 "
                "or BEM-353 the upstream could not be reached or refused the update. A webhook "
                "failure (BEM-362 inside 'webhook') "
                "does not undo the publish: report it and do not call again."
            ),
            confirm_required=True,
            parameters=json_params(
                {
                    "note": {
                        "type": "string",
                        "maxLength": MAX_NOTE_CHARS,
                        "description": "Optional: one sentence for the person approving, on "
                        "what this publish contains.",
                    }
                },
                [],
            ),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        # The note has done its work by now: the person who approved the call read it.
        validate_arguments(self.spec(), args)
        result: JsonValue = await asyncio.to_thread(self.publish)
        return result

    def plan(self) -> PublishPlan:
        """Every check a publish makes before it pushes: BEM-360 or BEM-361 when one fails."""
        outcome = self._approved_review()
        return PublishPlan(
            repository=self._job.spec.repo,
            job=self._job.id,
            review_job=self._review_job,
            reviewed_branch=outcome.branch,
            verdict=str(outcome.verdict),
            sha=outcome.commit_sha,
            publish_ref=self._publish_ref(),
        )

    def publish(self) -> dict[str, Any]:
        """Check, push, notify: the tool's work, synchronously."""
        plan = self.plan()
        mirror = sync_mirror(plan.repository, self._repo_config, self._workspaces, self._callbacks)
        pushed = self._guard(
            plan.sha,
            plan.publish_ref,
            lambda: publish_commit(
                mirror, plan.sha, plan.publish_ref, self._repo_config, callbacks=self._callbacks
            ),
        )
        url = self._repo_config.docs_build_webhook
        report = None
        if url:
            payload: dict[str, JsonValue] = {
                "repository": plan.repository,
                "publish_ref": pushed.branch,
                "sha": pushed.sha,
                "review_job": plan.review_job,
                "job": plan.job,
            }
            report = notify_webhook(url, payload, timeout=self._webhook_timeout)
        self.webhook = report
        self.outcome = PublishOutcome(
            publish_ref=pushed.branch,
            sha=pushed.sha,
            webhook_status=None if report is None else report.status,
        )
        return {
            "published": True,
            "repository": plan.repository,
            "publish_ref": pushed.branch,
            "sha": pushed.sha,
            "already_there": pushed.already_there,
            "review_job": plan.review_job,
            "webhook": None if report is None else report.model_dump(mode="json"),
            "note": _result_note(pushed.already_there, report),
        }

    def _approved_review(self) -> ReviewOutcome:
        review = self._lookup(self._review_job)
        name = f"review job {review.id}"
        repo = self._job.spec.repo
        outcome = review.result.outcome if review.result is not None else None
        problem = None
        if review.spec.kind is not JobKind.REVIEW:
            problem = f"job {review.id} is a {review.spec.kind.value} job, not a review"
        elif review.spec.repo != repo:
            problem = f"{name} reviewed the repository {review.spec.repo!r}, not {repo!r}"
        elif review.state is not JobState.SUCCEEDED:
            problem = f"{name} is {review.state.value}, not succeeded"
        elif not isinstance(outcome, ReviewOutcome):
            problem = f"{name} succeeded without recording a review"
        elif outcome.verdict not in APPROVING:
            problem = f"{name}'s verdict is {outcome.verdict or 'missing'}"
        if problem is not None or not isinstance(outcome, ReviewOutcome):
            raise BeamError(
                "BEM-360",
                f"{problem}. Only a succeeded review of this repository whose verdict is "
                "approve or approve_with_suggestions can be published; nothing was published.",
            )
        return outcome

    def _publish_ref(self) -> str:
        configured = self._repo_config.publish_ref
        repo = self._job.spec.repo
        if not configured:
            raise BeamError(
                "BEM-361",
                f"the repository {repo!r} has no publish_ref configured; an operator sets "
                f"repositories.{repo}.publish_ref to the branch the docs site is built from",
            )
        try:
            name = branch_name(configured)
        except BeamError as error:
            raise BeamError(
                "BEM-361", f"the publish_ref of {repo!r} is not a usable branch: {error.message}"
            ) from None
        pattern = ProtectedRefs(self._repo_config.protected_refs).matching_pattern(full_ref(name))
        if pattern is not None:
            raise BeamError(
                "BEM-361",
                f"the publish_ref {configured!r} of {repo!r} is protected (it matches "
                f"{pattern!r}); Riverbeam never moves a protected ref. An operator configures "
                "an unprotected publish branch, such as 'docs-live'.",
            )
        return name


def notify_webhook(url: str, payload: dict[str, JsonValue], *, timeout: float) -> WebhookReport:
    """POST ``payload`` as JSON to ``url``; a failure is reported, never raised."""
    shown = public_webhook_url(url)
    response = post_json(url, payload, timeout=timeout)
    if isinstance(response, str):
        return _failed(shown, None, f"could not be reached ({response})")
    if not response.is_success:
        status = f"answered HTTP {response.status_code} {response.reason_phrase}".rstrip()
        return _failed(shown, response.status_code, status)
    return WebhookReport(url=shown, delivered=True, status=response.status_code)


def _failed(shown: str, status: int | None, what: str) -> WebhookReport:
    message = (
        f"the docs-build webhook {shown} {what}; the publish itself is done. Check "
        "docs_build_webhook and the receiver."
    )
    return WebhookReport(
        url=shown, delivered=False, status=status, error=ErrorInfo(code="BEM-362", message=message)
    )


def _result_note(already_there: bool, report: WebhookReport | None) -> str:
    done = (
        "the publish branch was already at this commit; nothing was pushed"
        if already_there
        else "published"
    )
    if report is None or report.error is None:
        return done
    return (
        f"{done}; the docs-build notification failed (BEM-362, see 'webhook'): report it, "
        "and do not call publish_docset again"
    )
