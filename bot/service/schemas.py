"""The API's request and response bodies. The web pages validate their forms with the same
models, so a request means the same thing whichever door it comes through."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from bot.core.frames import ErrorInfo
from bot.core.jsonlimits import RequestMetadata
from bot.review.check_report import ChecksReport
from bot.review.links import LinkReport
from bot.review.words import WordChange, word_changes
from bot.store.models import (
    MAX_REQUEST_CHARS,
    Approval,
    ApprovalState,
    AuthorOutcome,
    DecisionBinding,
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
    UpstreamPush,
)

Page = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f]+$")]


class JobRequest(BaseModel):
    """A new job. Who asks comes from the token, not the body; ``metadata.confirm`` is
    dropped here, for every role: only the approval endpoints release a parked push."""

    model_config = ConfigDict(extra="forbid")

    kind: JobKind
    repo: str = Field(min_length=1, max_length=100, description="a registered repository")
    request: str = Field(default="", max_length=MAX_REQUEST_CHARS)
    base: str | None = Field(default=None, max_length=200)
    branch: str | None = Field(default=None, max_length=200)
    range: str | None = Field(default=None, max_length=420)
    review_job: str | None = Field(default=None, max_length=100)
    pages: list[Page] = Field(default_factory=list, max_length=20)
    metadata: RequestMetadata = Field(
        default_factory=dict, description="at most 32 levels deep and 64 KiB as JSON"
    )

    def to_spec(self, requested_by: str) -> JobSpec:
        """The job document; BEM-501 (through the caller) when the kind's fields are
        missing or malformed."""
        return JobSpec(
            kind=self.kind,
            repo=self.repo,
            request=self.request,
            base=self.base or None,
            branch=self.branch or None,
            range=self.range or None,
            review_job=self.review_job or None,
            pages=tuple(self.pages),
            requested_by=requested_by,
            metadata={key: value for key, value in self.metadata.items() if key != "confirm"},
        )


_RECORD_FIELDS = {
    "pushes",
    "id",
    "state",
    "created_at",
    "updated_at",
    "attempt",
    "approval_id",
    "cancel_requested",
    "result",
    "error",
}


class ApprovalBrief(BaseModel):
    """A job's current approval in brief: what a decision on it must name (``id`` as
    ``approval_id``, ``commit_sha``, ``diff_digest``), and who decided it."""

    id: str
    state: ApprovalState
    tool: str
    target_ref: str | None
    commit_sha: str | None
    diff_digest: str
    decided_by: str | None
    decided_by_os_user: str | None
    decided_at: datetime | None

    @classmethod
    def of(cls, approval: Approval) -> ApprovalBrief:
        return cls.model_validate(approval.model_dump(include=set(cls.model_fields)))


class JobView(BaseModel):
    id: str
    kind: JobKind
    repo: str
    state: JobState
    requested_by: str
    request: str
    base: str | None
    branch: str | None = Field(description="the branch reviewed or summarized")
    range: str | None
    review_job: str | None
    pages: list[str]
    job_branch: str | None = Field(description="the job's own branch (author jobs)")
    created_at: datetime
    updated_at: datetime
    attempt: int
    approval_id: str | None
    cancel_requested: bool
    result: JobResult | None
    error: ErrorInfo | None
    # Defaults keep `riverbeam ci` reading the answers of a server from before they existed.
    pushes: list[UpstreamPush] = Field(
        default_factory=list,
        description="what the job sent upstream, oldest first: under_way, landed, failed, or "
        "unknown (its worker was lost mid-push)",
    )
    approval: ApprovalBrief | None = Field(
        default=None,
        description="the job's current approval (reading one job; null in lists and for a "
        "job that never parked)",
    )

    @classmethod
    def of(cls, record: JobRecord, approval: Approval | None = None) -> JobView:
        # The spec's fields, then the record's; the record's own branch is ``job_branch``.
        fields = record.spec.model_dump(exclude={"metadata"})
        fields.update(record.model_dump(include=_RECORD_FIELDS), job_branch=_own_branch(record))
        fields["approval"] = None if approval is None else ApprovalBrief.of(approval)
        return cls.model_validate(fields)


def _own_branch(record: JobRecord) -> str | None:
    # Records a previous release finished carry no branch; their author outcome names it.
    if record.branch is not None:
        return record.branch
    outcome = record.result.outcome if record.result is not None else None
    return outcome.branch if isinstance(outcome, AuthorOutcome) else None


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")
    unreadable: list[str] = Field(
        default_factory=list,
        description="ids of jobs on this page whose stored record cannot be read (BEM-516)",
    )


class ApprovalView(BaseModel):
    """A pending (or decided) push: exactly what would land, and who decided."""

    id: str
    job_id: str
    repo: str
    requested_by: str
    tool: str
    arguments: dict[str, JsonValue]
    commit_sha: str | None
    target_ref: str | None
    base_sha: str | None
    diff_digest: str
    diff_stat: str
    diff: str
    created_at: datetime
    state: ApprovalState
    decided_by: str | None
    decided_by_os_user: str | None = Field(
        description="the OS account that ran the CLI recording the decision; null otherwise"
    )
    decided_at: datetime | None
    comment: str
    links: LinkReport | None = Field(
        description="the changed Markdown pages' relative links and images checked against "
        "the commit (broken ones with page and line), and their external links, listed and "
        "never fetched; null for an approval opened before links were checked"
    )
    checks: ChecksReport | None = Field(
        default=None,
        description="the repository's docs checks of the commit, run in the sandbox as the "
        "job parked: per check its findings the change introduces and those already on the "
        "base, and its time; null when the repository declares no checks",
    )
    checks_block: bool = Field(
        default=False, description="a new check failure refuses the approve (BEM-606)"
    )
    checks_overridden_by: str | None = Field(
        default=None, description="the admin who approved over a blocking check failure"
    )
    word_changes: list[WordChange] = Field(
        description="each run of removed lines with the added lines replacing it, the words "
        "that changed marked; computed from `diff` when read, never stored"
    )

    @classmethod
    def of(cls, approval: Approval) -> ApprovalView:
        # The pages' sources stay out: a reviewer reads them rendered on the job page.
        shown = approval.model_dump(exclude={"call_id", "applied", "pages"})
        return cls.model_validate({**shown, "word_changes": word_changes(approval.diff)})


class ApprovalList(BaseModel):
    items: list[ApprovalView]


class Decision(BaseModel):
    """A decision on the approval the reviewer looked at. ``approval_id``, ``commit_sha`` and
    ``diff_digest`` are copied from that approval as shown (``id``, ``commit_sha``,
    ``diff_digest``); a decision on anything else is BEM-604. An approve needs them
    (BEM-605); a refuse may leave all three out, since refusing releases nothing."""

    model_config = ConfigDict(extra="forbid")

    comment: str = Field(default="", max_length=4000)
    approval_id: str | None = Field(
        default=None, max_length=100, description="the id of the approval decided"
    )
    commit_sha: str | None = Field(
        default=None, max_length=64, description="its commit (null when it names none)"
    )
    diff_digest: str | None = Field(
        default=None, max_length=100, description="its diff digest ('' when it has no diff)"
    )
    override_checks: bool = Field(
        default=False,
        description="approve over a blocking docs-check failure (admins only; recorded)",
    )

    def binding(self) -> DecisionBinding | None:
        """What the decision names; None when it names nothing."""
        return DecisionBinding.named(self.approval_id, self.commit_sha, self.diff_digest)
