"""The forge-neutral events a webhook delivery is normalized into. Each names the forge (the
``[forges.<name>]`` table), the delivery, the forge repository and who acted; it is what
the webhook door queues (JSON), so it carries everything the workers need to decide."""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# Longest text kept of an issue body or a comment: the job request holds them.
MAX_TEXT_CHARS = 20_000

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


PullAction = Literal["opened", "updated", "ready"]
ThreadKind = Literal["issue", "pull_request"]
"""What a thread is on: GitLab numbers issues and merge requests apart (both have an iid 1)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Thread(_Frozen):
    """The issue or pull request a comment or label is on."""

    kind: ThreadKind
    number: int = Field(ge=1, description="GitLab: the iid")
    title: str
    body: Text = ""
    url: str
    author: str | None = Field(description="its author's login (GitLab names only an id)")

    @classmethod
    def of_pull(cls, pull: PullRequest) -> Thread:
        return cls(
            kind="pull_request",
            number=pull.number,
            title=pull.title,
            body=pull.body,
            url=pull.url,
            author=pull.author,
        )


class PullRequest(_Frozen):
    number: int = Field(ge=1, description="GitLab: the iid")
    title: str
    body: Text = ""
    url: str
    author: str | None
    head_sha: str
    head_ref: str
    base_ref: str
    from_fork: bool
    draft: bool = False


class ThreadComment(_Frozen):
    author: str
    body: Text


class ReviewThread(_Frozen):
    """An open review thread of a pull request, as its first comment: the forge's id of the
    thread (GitHub: the comment's; GitLab: the discussion's), to reply on."""

    id: str = Field(min_length=1, max_length=100)
    author: str
    body: Text
    path: str | None = None
    line: int | None = None


class Envelope(TypedDict):
    """What every event names: the fields of ``_Event``."""

    forge: str
    delivery: str
    repository: str
    actor: str


class _Event(_Frozen):
    forge: str
    delivery: str
    repository: str = Field(description="the forge's path: owner/name, a GitLab project path")
    actor: str = Field(description="the login of who acted")


class CommentCreated(_Event):
    """A new comment on an issue or pull request (a line comment of a review included)."""

    type: Literal["comment"] = "comment"
    thread: Thread
    pull: PullRequest | None = Field(
        default=None, description="the pull request, when the delivery describes it"
    )
    body: Text
    url: str
    review_line: bool = Field(default=False, description="a comment on a line of a review")


class IssueLabeled(_Event):
    type: Literal["label"] = "label"
    thread: Thread
    labels: tuple[str, ...] = Field(description="the labels given")


class PullRequestChanged(_Event):
    """A pull request opened, given new commits, or marked ready for review."""

    type: Literal["pull_request"] = "pull_request"
    action: PullAction
    pull: PullRequest


ForgeEvent = Annotated[
    CommentCreated | IssueLabeled | PullRequestChanged, Field(discriminator="type")
]
FORGE_EVENT: TypeAdapter[ForgeEvent] = TypeAdapter(ForgeEvent)


class Ignored(_Frozen):
    """A delivery that asks nothing of Riverbeam, and why: answered 200, never queued."""

    reason: str


def clipped(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"
