"""The documents of the job service: what a job asks for, where it stands, what it produced,
and the approvals that gate its pushes. They are stored in Redis as JSON and cross every
process boundary (API, CLI, Celery), so each is a pydantic model.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from bot.config import REPOSITORY_NAME
from bot.core.errors import ApprovalError, JobError
from bot.core.frames import ErrorInfo, Frame, Usage
from bot.core.jobids import JOB_ID_PATTERN
from bot.review.check_report import ChecksReport
from bot.review.links import LinkReport
from bot.review.preview import PageSource


def utcnow() -> datetime:
    return datetime.now(UTC)


class JobKind(StrEnum):
    AUTHOR = "author"
    REVIEW = "review"
    SUMMARIZE = "summarize"
    COMMIT_NOTES = "commit-notes"
    PUBLISH = "publish"

    @property
    def skill(self) -> str:
        """The skill whose prompt and allowlist the job's agent runs with."""
        return "gfs-publish" if self is JobKind.PUBLISH else self.value


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.REFUSED, JobState.CANCELLED}
)

# queued → running → awaiting_approval → running → succeeded | failed | refused | cancelled.
# A running job whose worker died goes back to running under a new lease (see JobRecord).
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.RUNNING,
            JobState.AWAITING_APPROVAL,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.REFUSED,
            JobState.CANCELLED,
        }
    ),
    JobState.AWAITING_APPROVAL: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.REFUSED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

_NAME = REPOSITORY_NAME
_JOB_ID = JOB_ID_PATTERN
_RANGE = re.compile(r"^(?P<start>[^.\s]+(?:\.[^.\s]+)*)\.\.(?P<end>[^.\s]+(?:\.[^.\s]+)*)$")
MAX_REQUEST_CHARS = 20_000
MAX_GIVEN_UP = 20


class JobSpec(BaseModel):
    """What a job asks for. It names a registered repository, never a path or a URL; branch
    names are checked again against the ref policy where they are used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: JobKind
    repo: str = Field(pattern=_NAME, description="a repository registered in the config")
    request: str = Field(default="", max_length=MAX_REQUEST_CHARS)
    base: str | None = Field(default=None, max_length=200, description="base branch")
    branch: str | None = Field(
        default=None,
        max_length=200,
        description="branch to review or summarize; for an author job, a branch of "
        "Riverbeam's own it adds commits to, as a fast-forward (a pull request's)",
    )
    range: str | None = Field(default=None, max_length=420, description="commit-notes range 'A..B'")
    review_job: str | None = Field(
        default=None,
        pattern=_JOB_ID,
        description="publish: the completed review job whose approved commit is published",
    )
    pages: tuple[
        Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f]+$")], ...
    ] = Field(
        default=(), max_length=20, description="pages the request concerns (paths in the tree)"
    )
    requested_by: str = Field(default="anonymous", min_length=1, max_length=200)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _no_confirm(cls, metadata: dict[str, JsonValue]) -> dict[str, JsonValue]:
        # Approval happens only through an approval record: a client-supplied confirm flag
        # never reaches the runner, whoever sent it.
        return {key: value for key, value in metadata.items() if key != "confirm"}

    @model_validator(mode="after")
    def _fits_kind(self) -> JobSpec:
        needs = {
            JobKind.AUTHOR: ("request",),
            JobKind.REVIEW: ("branch",),
            JobKind.SUMMARIZE: ("branch",),
            JobKind.PUBLISH: ("review_job",),
        }.get(self.kind, ())
        missing = [name for name in needs if not getattr(self, name)]
        if self.kind is JobKind.COMMIT_NOTES and not (self.range or self.branch):
            missing.append("range or branch")
        if missing:
            article = "an" if self.kind.value[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.kind.value} job needs {', '.join(missing)}")
        if self.range is not None and not _RANGE.match(self.range):
            raise ValueError("range must look like 'A..B' (two commits or branches)")
        return self

    def range_ends(self) -> tuple[str, str] | None:
        if self.range is None:
            return None
        match = _RANGE.match(self.range)
        assert match is not None  # checked by the validator
        return match["start"], match["end"]


class CommitInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sha: str
    subject: str


class AuthorOutcome(BaseModel):
    kind: Literal["author"] = "author"
    branch: str
    commits: list[CommitInfo] = Field(default_factory=list)
    diff_stat: str = ""
    pushed_sha: str | None = None

    def missing(self) -> JobError | None:
        """BEM-524 when the branch holds commits that were not pushed. (No commit at all is
        a "nothing to change" answer; the executor checks that it says why.)"""
        if not self.commits or self.commits[-1].sha == self.pushed_sha:
            return None
        tip = self.commits[-1].sha[:12]
        if self.pushed_sha is None:
            return JobError("BEM-524", f"the job committed {tip} on {self.branch} but never pushed")
        return JobError(
            "BEM-524",
            f"the job pushed {self.pushed_sha[:12]} but committed {tip} after it on {self.branch}",
        )


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    line: int | None = None
    severity: Literal["blocker", "major", "minor", "nit"] = "minor"
    note: str
    suggestion: str | None = None


class ReviewOutcome(BaseModel):
    kind: Literal["review"] = "review"
    branch: str
    commit_sha: str
    verdict: Literal["approve", "approve_with_suggestions", "request_changes"] | None = None
    summary: str = ""
    findings: list[Finding] = Field(default_factory=list)
    # The repository's docs checks on the commit reviewed against the merge base, run by the
    # worker (docs/checks.md); their new findings are among ``findings`` too.
    checks: ChecksReport | None = None

    def missing(self) -> JobError | None:
        if self.verdict is not None:
            return None
        return JobError(
            "BEM-521", f"the review of {self.branch} delivered no verdict (no review_change call)"
        )


class SummaryOutcome(BaseModel):
    kind: Literal["summarize"] = "summarize"
    branch: str
    base: str
    commits: list[CommitInfo] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    summary: str = ""

    def missing(self) -> JobError | None:
        if self.summary.strip():
            return None
        return JobError("BEM-522", f"the summary of {self.branch} since {self.base} is empty")


class CommitNotesOutcome(BaseModel):
    kind: Literal["commit-notes"] = "commit-notes"
    range: str
    subject: str = ""
    body: str = ""
    subject_truncated: bool = Field(
        default=False, description="the model's subject was over 72 characters and was cut"
    )

    def missing(self) -> JobError | None:
        if self.subject.strip():
            return None
        return JobError("BEM-523", f"the commit notes for {self.range} have no subject line")


class PublishOutcome(BaseModel):
    kind: Literal["publish"] = "publish"
    publish_ref: str
    sha: str | None = None
    webhook_status: int | None = None
    webhook_error: ErrorInfo | None = None

    def missing(self) -> JobError | None:
        if self.sha is not None:
            return None
        return JobError("BEM-525", f"nothing was published to {self.publish_ref}")


Outcome = Annotated[
    AuthorOutcome | ReviewOutcome | SummaryOutcome | CommitNotesOutcome | PublishOutcome,
    Field(discriminator="kind"),
]


class JobResult(BaseModel):
    """What a finished job produced: the agent's answer and the kind's structured outcome."""

    text: str = ""
    outcome: Outcome | None = None
    usage: Usage = Field(default_factory=Usage)
    model_used: str | None = None
    tool_calls: int = 0
    refusal: str | None = Field(default=None, description="what the model said in declining")


class PushState(StrEnum):
    UNDER_WAY = "under_way"
    # The upstream branch is at the commit: pushed now, or already there.
    LANDED = "landed"
    # The relay refused or failed before the upstream took the commit (``error`` says why).
    FAILED = "failed"
    # The job ended (its worker was lost) while the push was under way: look upstream.
    UNKNOWN = "unknown"


class UpstreamPush(BaseModel):
    """One push of an approved commit to the upstream, as the job record keeps it. It is
    recorded as under way before the relay starts, so a cancel meanwhile is refused
    (BEM-512) instead of ending the job with the push landing behind its back."""

    sha: str
    ref: str
    state: PushState = PushState.UNDER_WAY
    started_at: datetime
    ended_at: datetime | None = None
    already_there: bool = False
    error: ErrorInfo | None = None


class JobRecord(BaseModel):
    """A job and where it stands. ``version`` grows with every change: writers compare and
    set on it, so two workers can never both move a job. A running job holds a lease that
    its worker renews; a redelivered task may take the job over only once the lease ran out.
    """

    id: str = Field(pattern=_JOB_ID)
    spec: JobSpec
    state: JobState = JobState.QUEUED
    version: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    attempt: int = 0
    worker: str | None = None
    lease_until: datetime | None = None
    branch: str | None = Field(default=None, description="the job's own branch (author)")
    approval_id: str | None = Field(default=None, description="the approval it waits on")
    cancel_requested: bool = False
    result: JobResult | None = None
    error: ErrorInfo | None = None
    # Absent from records stored before pushes were recorded: none then.
    pushes: list[UpstreamPush] = Field(
        default_factory=list, description="what the job sent upstream, oldest first"
    )
    # Absent from records stored before it was kept: none then.
    posts_given_up: list[ErrorInfo] = Field(
        default_factory=list,
        description="posts outside that were given up (the parked-push webhook, the forge's "
        f"comments, reviews and pull requests), each with its code; the last {MAX_GIVEN_UP}",
    )

    @property
    def push_under_way(self) -> UpstreamPush | None:
        last = self.pushes[-1] if self.pushes else None
        return last if last is not None and last.state is PushState.UNDER_WAY else None


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REFUSED = "refused"
    # Nobody decided: the job ended (cancelled, failed) while the approval was still pending.
    WITHDRAWN = "withdrawn"


DIGEST_PREFIX = "sha256:"


class DecisionBinding(BaseModel):
    """What a decision names: the approval a person looked at, as it was shown to them (its
    id, the commit and the diff digest). A decision whose binding is not the approval that
    waits now is refused (BEM-604), so nobody approves a change they never saw."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approval_id: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")
    commit_sha: str | None = Field(
        default=None, max_length=64, description="null when the approval names no commit"
    )
    diff_digest: str = Field(
        default="", max_length=100, description="'' when the approval has no diff"
    )

    @field_validator("commit_sha")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return value.strip().lower() or None

    @field_validator("diff_digest")
    @classmethod
    def _digest(cls, value: str) -> str:
        # Shown as ``sha256:<hex>`` by the CLI and the web page; stored without the prefix.
        return value.strip().lower().removeprefix(DIGEST_PREFIX)

    @classmethod
    def named(
        cls, approval_id: str | None, commit_sha: str | None, diff_digest: str | None
    ) -> DecisionBinding | None:
        """The binding a decision's fields name, as a client sent them; None when they name
        nothing. BEM-604 when they name something no approval could be."""
        if approval_id is None:
            if commit_sha is not None or diff_digest is not None:
                raise ApprovalError(
                    "BEM-604", "a commit or digest without the approval's id names no approval"
                )
            return None
        try:
            return cls(
                approval_id=approval_id, commit_sha=commit_sha, diff_digest=diff_digest or ""
            )
        except ValidationError:
            raise ApprovalError(
                "BEM-604", f"{approval_id[:100]!r} is not an approval id; look at the job again"
            ) from None

    def differences(self, other: DecisionBinding) -> list[str]:
        """What differs from ``other`` (the approval waiting), in words."""
        return [
            f"{name} {mine or 'none'!s} is not {theirs or 'none'!s}"
            for name, mine, theirs in (
                ("approval", self.approval_id, other.approval_id),
                ("commit", self.commit_sha, other.commit_sha),
                ("diff digest", self.diff_digest, other.diff_digest),
            )
            if mine != theirs
        ]


class Approval(BaseModel):
    """A person's decision on one pending call, bound to exactly what would run: the tool,
    its arguments, the commit, the target ref and a digest of the diff that would land.
    ``applied`` is set once, by the resume that acts on it, so a decision applies once."""

    id: str
    job_id: str
    repo: str
    requested_by: str
    call_id: str
    tool: str
    arguments: dict[str, JsonValue]
    commit_sha: str | None = None
    target_ref: str | None = None
    base_sha: str | None = Field(default=None, description="the commit the diff starts from")
    diff_digest: str = ""
    diff_stat: str = ""
    diff: str = Field(default="", description="the diff that would land, capped")
    # Checked when the approval opened, where the commit's objects are; None for an approval
    # opened by a release before the check (it loads as "not checked").
    links: LinkReport | None = Field(
        default=None, description="the changed Markdown pages' links, checked against the commit"
    )
    # The changed pages' text before and after, for the rendered preview (rendered when shown,
    # so a sanitiser fix reaches approvals already waiting); None before the preview existed.
    pages: list[PageSource] | None = Field(
        default=None, description="the changed Markdown pages, before and after, capped"
    )
    # The docs checks of the commit, run by the worker as it parked (docs/checks.md); None
    # when the repository declares none (and for an approval opened before them).
    checks: ChecksReport | None = Field(
        default=None, description="the docs checks of the commit, new failures first"
    )
    checks_block: bool = Field(
        default=False, description="a new check failure refuses the approve (checks.block)"
    )
    checks_overridden_by: str | None = Field(
        default=None, description="the admin who approved over a blocking check failure"
    )
    created_at: datetime = Field(default_factory=utcnow)
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str | None = None
    decided_by_os_user: str | None = Field(
        default=None,
        description="the operating-system account that ran the CLI which recorded the "
        "decision (the CLI takes the reviewer's name on trust); null for the API and web",
    )
    decided_at: datetime | None = None
    comment: str = ""
    applied: bool = False

    def binding(self) -> DecisionBinding:
        """What a decision on this approval must name. Every approval ever stored has an id
        and a digest field ("" when there is no diff), so old records bind the same way."""
        return DecisionBinding(
            approval_id=self.id, commit_sha=self.commit_sha, diff_digest=self.diff_digest
        )

    @property
    def decider(self) -> str:
        """Who decided, as shown: the name, and the OS account when the CLI recorded it."""
        who = self.decided_by or ""
        return f"{who} (OS user {self.decided_by_os_user})" if self.decided_by_os_user else who


class ApprovalSummary(BaseModel):
    """What counting and ageing the approval queue need of one pending approval, kept beside
    it so that ``/metrics`` never reads a diff."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    repo: str
    created_at: datetime

    @classmethod
    def of(cls, approval: Approval) -> ApprovalSummary:
        return cls(job_id=approval.job_id, repo=approval.repo, created_at=approval.created_at)


class JobEvent(BaseModel):
    """One entry of a job's event stream: a frame the agent produced, or the end marker
    carrying the final state. ``id`` is the stream entry id; a follower passes the last one
    it saw as ``after`` (or as an SSE ``Last-Event-ID``) to continue where it stopped."""

    model_config = ConfigDict(frozen=True)

    id: str
    frame: Frame | None = None
    end: JobState | None = None


def invalid_request(error: ValidationError) -> JobError:
    """BEM-501 naming each field pydantic refused, in words a person can act on."""
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return JobError("BEM-501", f"invalid job request: {'; '.join(problems)}")


class ForgeThreadRef(BaseModel):
    """Where a comment on a forge goes: a ``[forges.<name>]`` of the configuration, the
    repository's path on it, and the issue's or pull request's number (GitLab: iid)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    forge: str
    repository: str
    number: int = Field(ge=1)
    thread: Literal["issue", "pull_request"] = "issue"

    @classmethod
    def of_job(cls, spec: JobSpec) -> ForgeThreadRef | None:
        """The thread a job came from (``metadata["forge"]``, set by the forge handler), or
        None for a job from anywhere else."""
        origin = spec.metadata.get("forge")
        if not isinstance(origin, dict):
            return None
        try:
            return cls(
                forge=str(origin["name"]),
                repository=str(origin["repository"]),
                number=int(str(origin["number"])),
                thread="pull_request" if origin.get("thread") == "pull_request" else "issue",
            )
        except (KeyError, ValueError, ValidationError):
            return None


class OutboxEntry(BaseModel):
    """A call to make outside, queued in the store so it survives the worker that queued it
    and is tried again until it is delivered or given up (``bot.store.outgoing``). What to
    call is named, not stored: ``channel`` of repository ``repo`` (the parked-push webhook)
    or the forge of ``forge`` (a comment, ``payload["body"]``) is looked up in the
    configuration when it is delivered, so no URL's secret and no credential rests in
    Redis."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    channel: Literal[
        "approval_webhook",
        "forge_comment",
        "forge_status",
        "forge_pull_request",
        "forge_review",
        "forge_reply",
    ]
    repo: str
    forge: ForgeThreadRef | None = None
    job_id: str | None = None
    event: str
    payload: dict[str, JsonValue]
    created_at: datetime
    attempts: int = 0
    last_error: ErrorInfo | None = None
    given_up_at: datetime | None = None
