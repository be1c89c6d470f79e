"""Webhook payloads into ``ForgeEvent``s. GitHub's are the published examples
(``@octokit/webhooks-examples``), each first held to its schema (``@octokit/openapi-webhooks``,
strictly, also after a test changed it); GitLab's are those of GitLab's documentation
("Webhook events", https://docs.gitlab.com/user/project/integrations/webhook_events/)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.errors import BeamError
from bot.forge.inbound import github, gitlab
from bot.forge.inbound.forge_events import (
    CommentCreated,
    Ignored,
    IssueLabeled,
    PullRequestChanged,
)
from harness.forges import check_github, github_example
from tests.forge.kit import (
    BOT,
    GITHUB_REPO,
    GITLAB_ISSUE_PROJECT,
    GITLAB_MR_PROJECT,
    github_config,
    gitlab_config,
    gitlab_payload,
    with_has_discussions,
)


def _github(event: str, payload: dict[str, Any], **config: Any) -> Any:
    if payload.get("action"):
        check_github(event, payload["action"], payload)
    return github.normalize(
        event, payload, forge="gh", delivery="d-1", config=github_config(**config)
    )


def _gitlab(event: str, payload: dict[str, Any], **config: Any) -> Any:
    return gitlab.normalize(
        event, payload, forge="gl", delivery="d-1", config=gitlab_config(**config)
    )


# GitHub -------------------------------------------------------------------------------


def test_a_new_issue_comment_is_a_comment_on_its_issue() -> None:
    payload = github_example("issue_comment", "created", 1)
    payload["comment"]["body"] = "@riverbeam fix the install page"
    event = _github("issue_comment", payload)
    assert isinstance(event, CommentCreated)
    assert (event.repository, event.actor, event.delivery) == (GITHUB_REPO, "Codertocat", "d-1")
    assert event.thread.kind == "issue" and event.thread.number == payload["issue"]["number"]
    assert event.thread.title == payload["issue"]["title"]
    assert event.body == "@riverbeam fix the install page"
    assert event.url == payload["comment"]["html_url"] and not event.review_line


@pytest.mark.parametrize("index", [0, 1])
def test_an_edited_comment_counts_as_nothing(index: int) -> None:
    payload = github_example("issue_comment", "edited", index)
    payload["comment"]["body"] = "@riverbeam fix the install page"
    event = _github("issue_comment", payload)
    assert isinstance(event, Ignored) and "edited" in event.reason


def test_riverbeams_own_comment_is_ignored() -> None:
    payload = github_example("issue_comment", "created", 1)
    payload["sender"]["login"] = BOT
    payload["comment"]["body"] = "@riverbeam fix the install page"
    event = _github("issue_comment", payload)
    assert isinstance(event, Ignored) and "own account" in event.reason


def test_a_label_given_to_an_issue() -> None:
    event = _github("issues", github_example("issues", "labeled", 0))
    assert isinstance(event, IssueLabeled) and event.labels == ("bug",)
    assert event.thread.kind == "issue"


@pytest.mark.parametrize(
    ("action", "index", "expected"),
    [("opened", 1, "opened"), ("ready_for_review", 1, "ready"), ("synchronize", 0, "updated")],
)
def test_a_pull_request_opened_updated_or_ready(action: str, index: int, expected: str) -> None:
    payload = with_has_discussions(github_example("pull_request", action, index))
    event = _github("pull_request", payload, installations=[1])
    assert isinstance(event, PullRequestChanged) and event.action == expected
    pull = payload["pull_request"]
    assert event.pull.head_sha == pull["head"]["sha"] and event.pull.base_ref == pull["base"]["ref"]
    assert not event.pull.from_fork


def test_a_pull_request_from_a_fork_is_marked_so() -> None:
    payload = github_example("pull_request", "opened", 1)
    payload["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    event = _github("pull_request", payload, installations=[1])
    assert isinstance(event, PullRequestChanged) and event.pull.from_fork


def test_riverbeams_own_pull_request_is_still_reviewed() -> None:
    payload = github_example("pull_request", "opened", 1)
    payload["sender"]["login"] = BOT
    event = _github("pull_request", payload, installations=[1])
    assert isinstance(event, PullRequestChanged)


def test_a_review_comment_is_a_comment_on_a_line_of_the_pull_request() -> None:
    payload = with_has_discussions(github_example("pull_request_review_comment", "created", 1))
    payload["comment"]["body"] = "@riverbeam address the review"
    event = _github("pull_request_review_comment", payload, installations=[1])
    assert isinstance(event, CommentCreated) and event.review_line
    assert event.pull is not None and event.thread.kind == "pull_request"


def test_an_unknown_installation_is_refused() -> None:
    payload = github_example("pull_request", "opened", 1)
    assert payload["installation"]["id"] == 1
    for allowed in ([2], []):
        with pytest.raises(BeamError) as refused:
            _github("pull_request", payload, installations=allowed)
        assert refused.value.code == "BEM-802"
    # A repository webhook (no installation) on a forge configured for an App.
    bare = github_example("issue_comment", "created", 1)
    with pytest.raises(BeamError, match="BEM-802"):
        _github("issue_comment", bare, installations=[1])


def test_a_repository_not_configured_gets_nothing() -> None:
    payload = github_example("issue_comment", "created", 1)
    payload["repository"]["full_name"] = "Codertocat/Elsewhere"
    event = _github("issue_comment", payload)
    assert isinstance(event, Ignored) and "not configured" in event.reason


def test_a_ping_and_other_events_start_nothing() -> None:
    assert isinstance(_github("ping", github_example("ping", None, 0)), Ignored)
    closed = github_example("issues", "opened", 0)
    assert isinstance(_github("issues", closed), Ignored)


def test_a_payload_that_is_not_githubs_is_bem_804() -> None:
    payload = github_example("issue_comment", "created", 1)
    del payload["comment"]["html_url"]
    with pytest.raises(BeamError, match="BEM-804"):
        github.normalize("issue_comment", payload, forge="gh", delivery="d", config=github_config())


# GitLab -------------------------------------------------------------------------------


def test_gitlab_a_comment_on_an_issue() -> None:
    event = _gitlab("Note Hook", gitlab_payload("note-issue"))
    assert isinstance(event, CommentCreated)
    assert (event.repository, event.actor) == (GITLAB_ISSUE_PROJECT, "root")
    assert event.thread.kind == "issue" and event.thread.number == 17
    assert event.body == "Hello world" and event.url.endswith("#note_1241")


def test_gitlab_a_comment_on_a_merge_request() -> None:
    event = _gitlab("Note Hook", gitlab_payload("note-merge-request"))
    assert isinstance(event, CommentCreated) and event.pull is not None
    assert event.thread.kind == "pull_request" and event.thread.number == 1
    assert event.pull.head_sha == "562e173be03b8ff2efb05345d12df18815438a4b"
    assert not event.pull.from_fork


def test_gitlab_an_edited_comment_counts_as_nothing() -> None:
    payload = gitlab_payload("note-issue")
    payload["object_attributes"]["action"] = "update"  # what GitLab 16.11+ sends on an edit
    event = _gitlab("Note Hook", payload)
    assert isinstance(event, Ignored) and "updated" in event.reason


def test_gitlab_riverbeams_own_comment_is_ignored() -> None:
    payload = gitlab_payload("note-issue")
    payload["user"]["username"] = "riverbeam-bot"
    assert isinstance(_gitlab("Note Hook", payload), Ignored)


def test_gitlab_merge_request_opened_updated_ready() -> None:
    opened = _gitlab("Merge Request Hook", gitlab_payload("merge-request"))
    assert isinstance(opened, PullRequestChanged) and opened.action == "opened"
    assert opened.pull.head_ref == "ms-viewport" and opened.pull.base_ref == "master"
    # The page's example is of a project whose source and target project ids are 14 both.
    assert not opened.pull.from_fork
    pushed = gitlab_payload("merge-request")
    pushed["object_attributes"].update(action="update", oldrev="0" * 40)
    updated = _gitlab("Merge Request Hook", pushed)
    assert isinstance(updated, PullRequestChanged) and updated.action == "updated"
    readied = gitlab_payload("merge-request")
    readied["object_attributes"]["action"] = "update"  # its changes hold draft: true -> false
    ready = _gitlab("Merge Request Hook", readied)
    assert isinstance(ready, PullRequestChanged) and ready.action == "ready"
    merged = gitlab_payload("merge-request")
    merged["object_attributes"]["action"] = "merge"
    assert isinstance(_gitlab("Merge Request Hook", merged), Ignored)


def test_gitlab_a_merge_request_from_a_fork() -> None:
    payload = gitlab_payload("merge-request")
    payload["object_attributes"]["source_project_id"] = 99
    event = _gitlab("Merge Request Hook", payload)
    assert isinstance(event, PullRequestChanged) and event.pull.from_fork


def test_gitlab_a_label_given_to_an_issue() -> None:
    event = _gitlab("Issue Hook", gitlab_payload("issue"))
    # The example's labels change from API to Platform: Platform was given.
    assert isinstance(event, IssueLabeled) and event.labels == ("Platform",)
    assert event.thread.number == 23 and event.repository == GITLAB_MR_PROJECT


def test_gitlab_an_unknown_project_is_refused() -> None:
    payload = gitlab_payload("note-issue")
    payload["project"]["path_with_namespace"] = "someone/else"
    with pytest.raises(BeamError, match="BEM-802"):
        _gitlab("Note Hook", payload)
    # The right path, with another project's id than the one configured.
    with pytest.raises(BeamError, match="BEM-802"):
        _gitlab("Note Hook", gitlab_payload("note-issue"), entry={"project_id": 6})
    assert isinstance(
        _gitlab("Note Hook", gitlab_payload("note-issue"), entry={"project_id": 5}),
        CommentCreated,
    )


def test_gitlab_other_events_and_notes_start_nothing() -> None:
    assert isinstance(_gitlab("Push Hook", {}), Ignored)
    system = gitlab_payload("note-issue")
    system["object_attributes"]["system"] = True
    assert isinstance(_gitlab("Note Hook", system), Ignored)
