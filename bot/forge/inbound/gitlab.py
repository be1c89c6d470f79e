"""A GitLab delivery (``X-Gitlab-Event`` and its JSON payload) into a ``ForgeEvent``, or why
it asks nothing. The shapes are those of GitLab's "Webhook events" page
(https://docs.gitlab.com/user/project/integrations/webhook_events/); only the fields read
are modelled.

Refused (BEM-802): a project whose path is not in ``repositories`` (or whose id is not the
entry's ``project_id``). Ignored: the comments and labels of Riverbeam's own account, an
edited comment (``object_attributes.action`` ``update``), system notes, comments on commits
and snippets, and every event and action not listed in docs/forges.md.
"""

from __future__ import annotations

from typing import Any

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

NOTE_HOOKS = ("Note Hook", "Confidential Note Hook")
ISSUE_HOOKS = ("Issue Hook", "Confidential Issue Hook")
MERGE_REQUEST_HOOK = "Merge Request Hook"


class _GitlabLoose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _GitlabUser(_GitlabLoose):
    username: str


class _GitlabProject(_GitlabLoose):
    id: int
    path_with_namespace: str


class _GitlabLabel(_GitlabLoose):
    title: str


class _GitlabIssue(_GitlabLoose):
    iid: int
    title: str
    description: str | None = None
    url: str | None = None


class _GitlabCommit(_GitlabLoose):
    id: str


class _GitlabMergeRequest(_GitlabLoose):
    iid: int
    title: str
    description: str | None = None
    url: str | None = None
    source_branch: str
    target_branch: str
    source_project_id: int
    target_project_id: int
    last_commit: _GitlabCommit
    draft: bool = False
    work_in_progress: bool = False
    action: str | None = None
    oldrev: str | None = None


class _GitlabNote(_GitlabLoose):
    note: str
    noteable_type: str
    url: str
    system: bool = False
    type: str | None = None
    # Absent before GitLab 16.11, which sent only new comments.
    action: str | None = None


class _GitlabChange(_GitlabLoose):
    previous: Any = None
    current: Any = None


class _GitlabDelivery(_GitlabLoose):
    user: _GitlabUser
    project: _GitlabProject
    object_attributes: dict[str, Any]
    issue: _GitlabIssue | None = None
    merge_request: _GitlabMergeRequest | None = None
    changes: dict[str, _GitlabChange] = {}


def normalize(
    event: str, payload: dict[str, Any], *, forge: str, delivery: str, config: ForgeConfig
) -> ForgeEvent | Ignored:
    if event not in (*NOTE_HOOKS, *ISSUE_HOOKS, MERGE_REQUEST_HOOK):
        return Ignored(reason=f"{event or 'an event without X-Gitlab-Event'} starts nothing")
    try:
        found = _GitlabDelivery.model_validate(payload)
    except ValidationError as error:
        raise BeamError("BEM-804", f"the {event} payload is not GitLab's: {error}") from None
    project = found.project
    entry = config.repository_for(project.path_with_namespace)
    if entry is None or entry.project_id not in (None, project.id):
        raise BeamError(
            "BEM-802",
            f"project {project.path_with_namespace} (id {project.id}) is not configured "
            "for this forge",
        )
    # Its own comments and labels are never answered (it would answer itself); a pull
    # request it opened or pushed to is still reviewed, which posts no such event.
    if found.user.username.lower() == config.bot_login.lower() and event != MERGE_REQUEST_HOOK:
        return Ignored(reason="an event of Riverbeam's own account")
    base: Envelope = {
        "forge": forge,
        "delivery": delivery,
        "repository": project.path_with_namespace,
        "actor": found.user.username,
    }
    try:
        if event in NOTE_HOOKS:
            return _note(found, base)
        if event in ISSUE_HOOKS:
            return _labeled(found, base)
        return _merge_request(found, base)
    except ValidationError as error:
        raise BeamError("BEM-804", f"the {event} payload lacks what it needs: {error}") from None


def _note(found: _GitlabDelivery, base: Envelope) -> ForgeEvent | Ignored:
    note = _GitlabNote.model_validate(found.object_attributes)
    if note.action not in (None, "create"):
        return Ignored(reason=f"a comment {note.action}d: only a new comment counts")
    if note.system:
        return Ignored(reason="a system note")
    body = clipped(note.note)
    if note.noteable_type == "Issue" and found.issue is not None:
        return CommentCreated(**base, body=body, url=note.url, thread=_issue_thread(found.issue))
    if note.noteable_type == "MergeRequest" and found.merge_request is not None:
        pull = _pull(found.merge_request)
        return CommentCreated(
            **base,
            body=body,
            url=note.url,
            thread=Thread.of_pull(pull),
            pull=pull,
            review_line=note.type == "DiffNote",
        )
    return Ignored(reason=f"a comment on a {note.noteable_type} starts nothing")


def _labeled(found: _GitlabDelivery, base: Envelope) -> ForgeEvent | Ignored:
    issue = _GitlabIssue.model_validate(found.object_attributes)
    change = found.changes.get("labels")
    if change is None:
        return Ignored(reason="an issue changed, no label given")
    before = {_GitlabLabel.model_validate(label).title for label in change.previous or []}
    after = [_GitlabLabel.model_validate(label).title for label in change.current or []]
    given = tuple(title for title in after if title not in before)
    if not given:
        return Ignored(reason="an issue's labels changed, none given")
    return IssueLabeled(**base, thread=_issue_thread(issue), labels=given)


def _merge_request(found: _GitlabDelivery, base: Envelope) -> ForgeEvent | Ignored:
    request = _GitlabMergeRequest.model_validate(found.object_attributes)
    draft = found.changes.get("draft")
    action: PullAction
    if request.action == "open":
        action = "opened"
    elif request.action == "update" and request.oldrev:
        action = "updated"
    elif request.action == "update" and draft is not None and draft.previous and not draft.current:
        action = "ready"
    else:
        return Ignored(reason=f"a merge request {request.action or 'event'} starts nothing")
    return PullRequestChanged(**base, action=action, pull=_pull(request))


def _issue_thread(issue: _GitlabIssue) -> Thread:
    return Thread(
        kind="issue",
        number=issue.iid,
        title=issue.title,
        body=clipped(issue.description),
        url=issue.url or "",
        author=None,
    )


def _pull(request: _GitlabMergeRequest) -> PullRequest:
    return PullRequest(
        number=request.iid,
        title=request.title,
        body=clipped(request.description),
        url=request.url or "",
        author=None,
        head_sha=request.last_commit.id,
        head_ref=request.source_branch,
        base_ref=request.target_branch,
        from_fork=request.source_project_id != request.target_project_id,
        draft=request.draft or request.work_in_progress,
    )
