"""The forge contract: what the workers ask a forge (``ForgeLookup``) and what they post
back to it. Each forge (GitHub, GitLab, a later Gitea) is one module implementing
``ForgeClient``; the workers know only this module.

Errors, all ``ForgeClientError`` (BEM-820..829):

- ``ForgeRetryLater``: unreachable, past the call's deadline, a 5xx, a rate limit; the same
  call may succeed later, after ``retry_after_seconds`` when the forge named a wait;
- ``ForgeRefused``: any other refusal (a 4xx, a reply that is not the forge's API); retrying
  would be refused again;
- ``ForgeCredentialsError``: the key or token file cannot be read on this host.

No error, log line or ``repr`` holds a token or a key: a message names the file, never what
it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bot.core.errors import (
    ForgeClientError,
    ForgeCredentialsError,
    ForgeRefused,
    ForgeRetryLater,
)
from bot.forge.inbound.forge_events import ThreadKind
from bot.forge.inbound.lookups import ForgeLookup

__all__ = [
    "CommentRef",
    "CommitState",
    "ForgeClient",
    "ForgeClientError",
    "ForgeCredentialsError",
    "ForgeRefused",
    "ForgeRetryLater",
    "LineComment",
    "PullRequestRef",
]

CommitState = Literal["pending", "success", "failure", "error"]
"""A commit status's state, GitHub's names (GitLab: pending, success, failed, canceled)."""


class _Ref(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CommentRef(_Ref):
    """A comment Riverbeam posted, to edit it in place later (the job's status comment)."""

    id: int = Field(ge=1, description="the forge's comment id (GitLab: the note id)")
    number: int = Field(ge=1, description="the issue or pull request it is on (GitLab: iid)")
    url: str = Field(description="where a person reads it")
    on: ThreadKind = Field(
        default="issue", description="what ``number`` is: GitLab's notes live under either"
    )


class PullRequestRef(_Ref):
    """A pull request (GitLab: merge request) Riverbeam opened or found."""

    number: int = Field(ge=1, description="GitLab: the iid")
    url: str
    head: str = Field(description="the branch it merges from")
    base: str = Field(description="the branch it merges into")
    head_sha: str = Field(description="the head commit when it was read")


class LineComment(_Ref):
    """A review finding on one line of a pull request's diff (the line's number in the file
    after the change, ``RIGHT``; in the file before it, ``LEFT``)."""

    path: str = Field(min_length=1)
    line: int = Field(ge=1)
    body: str = Field(min_length=1)
    side: Literal["RIGHT", "LEFT"] = "RIGHT"


@runtime_checkable
class ForgeClient(ForgeLookup, Protocol):
    """What the workers ask a forge and post back to it. ``repository`` is the forge's path
    (``owner/name``, a GitLab project path); ``number`` an issue's or pull request's number
    (GitLab: its ``iid``), ``on`` which of the two it is. Each call runs under a total
    deadline."""

    def post_comment(
        self, repository: str, number: int, body: str, on: ThreadKind = "issue"
    ) -> CommentRef:
        """A new comment on the issue (``on="issue"``) or pull request ``number``."""
        ...

    def edit_comment(self, repository: str, ref: CommentRef, body: str) -> None:
        """Replace the body of a comment ``post_comment`` made."""
        ...

    def commentable_lines(self, repository: str, number: int) -> Mapping[str, frozenset[int]]:
        """For each file pull request ``number`` changes, the lines of the file after the
        change that its diff shows (added and context lines): where a line comment can go.
        A file the forge shows no diff for (binary, too large) has none."""
        ...

    def reply_to_thread(self, repository: str, number: int, thread_id: str, body: str) -> None:
        """A reply in review thread ``thread_id`` (``ReviewThread.id``) of pull request
        ``number``."""
        ...

    def find_pull_request(
        self, repository: str, head_branch: str, base: str
    ) -> PullRequestRef | None:
        """The open pull request from ``head_branch`` (of ``repository`` itself, never a
        fork's) into ``base``, or None."""
        ...

    def open_pull_request(
        self, repository: str, head: str, base: str, title: str, body: str
    ) -> PullRequestRef:
        """A new pull request from the branch ``head`` into ``base``."""
        ...

    def update_pull_request(self, repository: str, number: int, title: str, body: str) -> None:
        """New title and body for an open pull request."""
        ...

    def post_review(
        self,
        repository: str,
        number: int,
        commit_sha: str,
        body: str,
        line_comments: tuple[LineComment, ...],
    ) -> None:
        """A review of the pull request at ``commit_sha``, with line comments. It is always a
        comment, never an approval: a bot's approval could satisfy branch protection that
        is meant for people."""
        ...

    def set_status(
        self,
        repository: str,
        sha: str,
        context: str,
        state: CommitState,
        description: str,
        target_url: str | None,
    ) -> None:
        """The commit status ``context`` (``riverbeam/review``) of ``sha``."""
        ...
