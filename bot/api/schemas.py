"""The API's request and response bodies. The web pages validate their forms with the same
models, so a request means the same thing whichever door it comes through."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from bot.frames import ErrorInfo
from bot.jobs.models import (
    MAX_REQUEST_CHARS,
    Approval,
    ApprovalState,
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
)
from bot.jsonlimits import RequestMetadata

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

    @classmethod
    def of(cls, record: JobRecord) -> JobView:
        # The spec's fields, then the record's; the record's own branch is ``job_branch``.
        fields = record.spec.model_dump(exclude={"metadata"})
        fields.update(record.model_dump(include=_RECORD_FIELDS), job_branch=record.branch)
        return cls.model_validate(fields)


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
    decided_at: datetime | None
    comment: str

    @classmethod
    def of(cls, approval: Approval) -> ApprovalView:
        return cls.model_validate(approval.model_dump(exclude={"call_id", "applied"}))


class ApprovalList(BaseModel):
    items: list[ApprovalView]


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: str = Field(default="", max_length=4000)
