"""A GitHub delivery (``X-GitHub-Event`` and its JSON payload) into a ``ForgeEvent``, or why
it asks nothing. Only the fields read are modelled; GitHub's published schemas
(``@octokit/openapi-webhooks``) describe the rest, and the tests hold the examples to them.

Refused (BEM-802): a delivery for an installation not in ``installations``. Ignored: a
ping, the comments and labels of Riverbeam's own account, a repository not configured, an
edited or deleted comment, and every event and action not listed in docs/forges.md.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.config import ForgeConfig
from bot.core.errors import BeamError
from bot.forge.inbound.forge_events import (
    CommentCreated,
    Envelope,
    ForgeEvent,
    Ignored,
    IssueLabeled,
    PullAction,
    PullRequest,
    PullRequestChanged,
    Thread,
    clipped,
)

PULL_ACTIONS: dict[str, PullAction] = {
    "opened": "opened",
    "synchronize": "updated",
    "ready_for_review": "ready",
}
T = TypeVar("T")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _User(_Loose):
    login: str


class _Repo(_Loose):
    full_name: str


class _Installation(_Loose):
    id: int


class _Issue(_Loose):
    number: int
    title: str
    body: str | None = None
    html_url: str
    user: _User
    pull_request: dict[str, Any] | None = None


class _Comment(_Loose):
    body: str | None = None
    html_url: str
    user: _User


class _Branch(_Loose):
    ref: str
    sha: str
    # null when the fork it came from was deleted
    repo: _Repo | None = None


class _Pull(_Loose):
    number: int
    title: str
    body: str | None = None
    html_url: str
    user: _User
    head: _Branch
    base: _Branch
    draft: bool = False


class _Label(_Loose):
    name: str


class _Delivery(_Loose):
    action: str | None = None
    repository: _Repo | None = None
    sender: _User | None = None
    installation: _Installation | None = None
    issue: _Issue | None = None
    comment: _Comment | None = None
    pull_request: _Pull | None = None
    label: _Label | None = None


def normalize(
    event: str, payload: dict[str, Any], *, forge: str, delivery: str, config: ForgeConfig
) -> ForgeEvent | Ignored:
    if event == "ping":
        return Ignored(reason="a ping: the webhook is set up")
    try:
        found = _Delivery.model_validate(payload)
    except ValidationError as error:
        raise BeamError("BEM-804", f"the {event} payload is not GitHub's: {error}") from None
    _check_installation(found.installation, config)
    if found.repository is None or found.sender is None:
        return Ignored(reason=f"{event} names no repository or sender")
    # Its own comments and labels are never answered (it would answer itself); a pull
    # request it opened or pushed to is still reviewed, which posts no such event.
    if found.sender.login.lower() == config.bot_login.lower() and event != "pull_request":
        return Ignored(reason="an event of Riverbeam's own account")
    if config.repository_for(found.repository.full_name) is None:
        return Ignored(reason=f"repository {found.repository.full_name} is not configured")
    base: Envelope = {
        "forge": forge,
        "delivery": delivery,
        "repository": found.repository.full_name,
        "actor": found.sender.login,
    }
    try:
        return _event(event, found, base)
    except ValidationError as error:
        raise BeamError("BEM-804", f"the {event} payload lacks what it needs: {error}") from None


def _check_installation(installation: _Installation | None, config: ForgeConfig) -> None:
    named = None if installation is None else installation.id
    if named is None and not config.installations:
        return
    if named not in config.installations:
        allowed = ", ".join(map(str, config.installations)) or "none: a repository webhook"
        raise BeamError(
            "BEM-802", f"installation {named} is not configured for this forge ({allowed})"
        )


def _event(event: str, found: _Delivery, base: Envelope) -> ForgeEvent | Ignored:
    action = found.action or ""
    if event == "issue_comment":
        if action != "created":
            return Ignored(reason=f"a comment {action}: only a new comment counts")
        issue, comment = _need(found.issue, "issue"), _need(found.comment, "comment")
        return CommentCreated(
            **base, thread=_thread(issue), body=clipped(comment.body), url=comment.html_url
        )
    if event == "pull_request_review_comment":
        if action != "created":
            return Ignored(reason=f"a review comment {action}: only a new comment counts")
        pull = _pull(_need(found.pull_request, "pull_request"))
        comment = _need(found.comment, "comment")
        return CommentCreated(
            **base,
            thread=Thread.of_pull(pull),
            pull=pull,
            body=clipped(comment.body),
            url=comment.html_url,
            review_line=True,
        )
    if event == "issues" and action == "labeled":
        label, issue = _need(found.label, "label"), _need(found.issue, "issue")
        return IssueLabeled(**base, thread=_thread(issue), labels=(label.name,))
    if event == "pull_request" and action in PULL_ACTIONS:
        return PullRequestChanged(
            **base,
            action=PULL_ACTIONS[action],
            pull=_pull(_need(found.pull_request, "pull_request")),
        )
    return Ignored(reason=f"{event} {action} starts nothing".replace("  ", " "))


def _need(value: T | None, what: str) -> T:
    if value is None:
        raise BeamError("BEM-804", f"the payload has no {what}")
    return value


def _thread(issue: _Issue) -> Thread:
    return Thread(
        kind="issue" if issue.pull_request is None else "pull_request",
        number=issue.number,
        title=issue.title,
        body=clipped(issue.body),
        url=issue.html_url,
        author=issue.user.login,
    )


def _pull(pull: _Pull) -> PullRequest:
    head, base = pull.head.repo, pull.base.repo
    return PullRequest(
        number=pull.number,
        title=pull.title,
        body=clipped(pull.body),
        url=pull.html_url,
        author=pull.user.login,
        head_sha=pull.head.sha,
        head_ref=pull.head.ref,
        base_ref=pull.base.ref,
        from_fork=head is None or base is None or head.full_name != base.full_name,
        draft=pull.draft,
    )
