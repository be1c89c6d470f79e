"""Each method of the GitLab client against the fake, whose every exchange is checked against
the shapes of GitLab's API documentation (the fixture fails a test that sent anything they
do not allow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import ForgeConfig
from bot.core.errors import ForgeCredentialsError, ForgeRefused, ForgeRetryLater
from bot.forge.clients.choice import client_for
from bot.forge.clients.contract import CommitState, ForgeClient, LineComment
from bot.forge.clients.gitlab_api import GitLabClient, gitlab_client
from bot.forge.permissions import ForgePermission
from harness.fake_gitlab import FakeGitLab
from tests.forge.gitlab_client.conftest import PROJECT, TOKEN

ENCODED = PROJECT.replace("/", "%2F")


def test_the_client_is_a_forge_client(client: GitLabClient) -> None:
    def takes(forge: ForgeClient) -> ForgeClient:
        return forge

    assert takes(client) is client  # mypy checks the protocol here


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (10, ForgePermission.READ),  # Guest
        (20, ForgePermission.TRIAGE),  # Reporter
        (30, ForgePermission.WRITE),  # Developer
        (40, ForgePermission.MAINTAIN),  # Maintainer
        (50, ForgePermission.ADMIN),  # Owner
        (5, ForgePermission.NONE),  # Minimal access
    ],
)
def test_permission_is_the_members_access_level(
    gitlab: FakeGitLab, client: GitLabClient, level: int, expected: ForgePermission
) -> None:
    gitlab.add_project(PROJECT, members={"ada": level})
    assert client.permission(PROJECT, "ada") is expected
    user_id = gitlab.users["ada"]
    assert [r.path for r in gitlab.requests] == [
        "/api/v4/users",
        f"/api/v4/projects/{ENCODED}/members/all/{user_id}",
    ]
    assert all(r.token == TOKEN for r in gitlab.requests)


def test_no_member_no_user_or_a_blocked_one_is_no_permission(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT, members={"ada": 30, "bob": 40})
    gitlab.add_user("mallory")
    assert client.permission(PROJECT, "mallory") is ForgePermission.NONE  # a 404
    assert client.permission(PROJECT, "nobody") is ForgePermission.NONE  # no such user
    assert len(gitlab.requests) == 3  # no member lookup for a user GitLab does not know
    project.blocked.add("bob")
    assert client.permission(PROJECT, "bob") is ForgePermission.NONE


def test_the_project_is_addressed_by_its_id_when_configured(
    gitlab: FakeGitLab, token_file: Path
) -> None:
    project = gitlab.add_project(PROJECT, members={"ada": 30})
    client = GitLabClient(token_file, base_url=gitlab.url, project_ids={PROJECT: project.id})
    assert client.permission(PROJECT, "ada") is ForgePermission.WRITE
    assert gitlab.requests[-1].path.startswith(f"/api/v4/projects/{project.id}/members/all/")
    with pytest.raises(ForgeRefused, match="BEM-823"):
        client.permission("no-namespace", "ada")


def test_merge_request_same_project_and_fork(gitlab: FakeGitLab, client: GitLabClient) -> None:
    project = gitlab.add_project(PROJECT)
    own = gitlab.add_merge(
        project, source_branch="riverbeam/job-1", title="Docs", description="Fixes it"
    )
    fork = gitlab.add_merge(project, source_branch="patch-1", from_fork=True, author="eve")
    found = client.pull_request(PROJECT, own.iid)
    assert (found.number, found.title, found.body, found.author) == (
        own.iid,
        "Docs",
        "Fixes it",
        "ada",
    )
    assert (found.head_ref, found.base_ref, found.head_sha) == ("riverbeam/job-1", "main", own.sha)
    assert found.url == f"{gitlab.url}/{PROJECT}/-/merge_requests/{own.iid}"
    assert not found.from_fork
    assert client.pull_request(PROJECT, fork.iid).from_fork
    with pytest.raises(ForgeRefused, match=r"BEM-823.*404"):
        client.pull_request(PROJECT, 99)


def test_changed_paths_follow_every_page(gitlab: FakeGitLab, client: GitLabClient) -> None:
    project = gitlab.add_project(PROJECT)
    files: list[tuple[str, str]] = [(f"docs/p{i}.md", f"docs/p{i}.md") for i in range(230)]
    files.append(("old/guide.md", "docs/guide.md"))  # a move changes both folders
    merge = gitlab.add_merge(project, source_branch="many", files=files)
    paths = client.changed_paths(PROJECT, merge.iid)
    assert len(paths) == 232
    assert paths[-2:] == ["old/guide.md", "docs/guide.md"]
    assert gitlab.operations["merge_requests/diffs"] == 3  # 100 + 100 + 31, by X-Next-Page


def test_changed_paths_follow_the_link_header_alone(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="many", files=[f"f{i}" for i in range(150)])
    gitlab.link_only = True  # keyset pagination: no X-Next-Page
    assert len(client.changed_paths(PROJECT, merge.iid)) == 150
    assert gitlab.operations["merge_requests/diffs"] == 2


def test_the_next_page_never_goes_to_another_host(gitlab: FakeGitLab, client: GitLabClient) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="many", files=[f"f{i}" for i in range(150)])
    gitlab.link_only = True
    gitlab.next_link_base = "http://127.0.0.2:9"
    with pytest.raises(ForgeRefused, match=r"BEM-832.*another host"):
        client.changed_paths(PROJECT, merge.iid)
    assert len(gitlab.requests) == 1


def test_issue_and_merge_request_threads_are_apart(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT)
    issue = gitlab.add_issue(project, "Write the install page")
    merge = gitlab.add_merge(project, source_branch="docs")
    assert issue == merge.iid == 1  # GitLab numbers them apart
    gitlab.add_note(project, "issue", issue, "ada", "First, on the issue")
    gitlab.add_note(project, "issue", issue, "ada", "changed the description", system=True)
    gitlab.add_note(project, "issue", issue, "bob", "Second")
    gitlab.add_note(project, "pull_request", merge.iid, "eve", "On the merge request")
    on_issue = client.thread(PROJECT, issue)
    assert [(c.author, c.body) for c in on_issue] == [
        ("ada", "First, on the issue"),
        ("bob", "Second"),
    ]
    on_merge = client.thread(PROJECT, merge.iid, "pull_request")
    assert [c.body for c in on_merge] == ["On the merge request"]
    assert gitlab.requests[-1].path == f"/api/v4/projects/{ENCODED}/merge_requests/1/notes"


def test_post_then_edit_a_note_in_place(gitlab: FakeGitLab, client: GitLabClient) -> None:
    project = gitlab.add_project(PROJECT)
    issue = gitlab.add_issue(project, "Write the install page")
    merge = gitlab.add_merge(project, source_branch="docs")
    on_issue = client.post_comment(PROJECT, issue, "Queued.")
    on_merge = client.post_comment(PROJECT, merge.iid, "Reviewing.", "pull_request")
    assert (on_issue.on, on_merge.on) == ("issue", "pull_request")
    assert on_issue.url == f"{gitlab.url}/{PROJECT}/-/issues/{issue}#note_{on_issue.id}"
    assert on_merge.url.endswith(f"/-/merge_requests/{merge.iid}#note_{on_merge.id}")
    client.edit_comment(PROJECT, on_issue, "Running.")
    client.edit_comment(PROJECT, on_merge, "Reviewed.")
    notes = {n.id: (n.on, n.body) for n in project.notes.values()}
    assert notes == {on_issue.id: ("issue", "Running."), on_merge.id: ("pull_request", "Reviewed.")}
    assert (
        gitlab.operations["notes/update-issue"]
        == gitlab.operations["notes/update-merge-request"]
        == 1
    )


def test_find_open_and_update_a_merge_request(gitlab: FakeGitLab, client: GitLabClient) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_merge(project, source_branch="riverbeam/job-1", from_fork=True, author="eve")
    assert client.find_pull_request(PROJECT, "riverbeam/job-1", "main") is None  # a fork's
    opened = client.open_pull_request(PROJECT, "riverbeam/job-1", "main", "Docs: install", "Body")
    assert (opened.head, opened.base) == ("riverbeam/job-1", "main")
    assert opened.head_sha == project.merges[opened.number].sha
    found = client.find_pull_request(PROJECT, "riverbeam/job-1", "main")
    assert found == opened
    assert client.find_pull_request(PROJECT, "riverbeam/job-1", "release") is None
    client.update_pull_request(PROJECT, opened.number, "Docs: install, again", "Body 2")
    merge = project.merges[opened.number]
    assert (merge.title, merge.description, merge.author) == (
        "Docs: install, again",
        "Body 2",
        "riverbeam-bot",
    )
    created = [r.body for r in gitlab.requests if r.endpoint == "merge_requests/create"]
    assert created == [
        {
            "source_branch": "riverbeam/job-1",
            "target_branch": "main",
            "title": "Docs: install",
            "description": "Body",
        }
    ]
    # A second one for the same branches is GitLab's 409: refused, not retried.
    with pytest.raises(ForgeRefused, match=r"BEM-823.*409"):
        client.open_pull_request(PROJECT, "riverbeam/job-1", "main", "Again", "Body")


def test_a_review_is_diff_discussions_and_a_note_never_an_approval(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="docs", files=["docs/a.md", "docs/b.md"])
    merge.diffs.update(
        {"docs/a.md": "@@ -3 +3 @@\n-is done\n+does\n", "docs/b.md": "@@ -7 +6,0 @@\n-gone\n"}
    )
    comments = (
        LineComment(path="docs/a.md", line=3, body="Passive voice."),
        LineComment(path="docs/b.md", line=7, body="Was this removed?", side="LEFT"),
    )
    client.post_review(PROJECT, merge.iid, merge.sha, "2 findings.", comments)
    positions = [
        r.body["position"]
        for r in gitlab.requests
        if r.endpoint == "discussions/create-merge-request"
    ]
    base = gitlab.merge_document(project, merge, single=True)["diff_refs"]
    assert positions == [
        {
            **base,
            "position_type": "text",
            "old_path": "docs/a.md",
            "new_path": "docs/a.md",
            "new_line": 3,
        },
        {
            **base,
            "position_type": "text",
            "old_path": "docs/b.md",
            "new_path": "docs/b.md",
            "old_line": 7,
        },
    ]
    notes = [n for n in project.notes.values() if n.position is None]
    assert [n.body for n in notes] == ["2 findings."]
    assert not any("approve" in r.path for r in gitlab.requests)


def test_a_review_waits_for_gitlabs_diff_and_refuses_a_moved_head(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="docs", files=["docs/a.md"])
    finding = (LineComment(path="docs/a.md", line=1, body="Typo."),)
    merge.diff_ready = False  # just created: GitLab has not worked its diff out
    with pytest.raises(ForgeRetryLater, match="BEM-833"):
        client.post_review(PROJECT, merge.iid, merge.sha, "1 finding.", finding)
    merge.diff_ready = True
    with pytest.raises(ForgeRefused, match="BEM-834") as caught:
        client.post_review(PROJECT, merge.iid, "c" * 40, "1 finding.", finding)
    assert not isinstance(caught.value, ForgeRetryLater)
    assert project.notes == {}  # nothing was posted by either
    client.post_review(PROJECT, merge.iid, merge.sha, "No finding.", ())
    assert [n.body for n in project.notes.values()] == ["No finding."]
    assert gitlab.operations["merge_requests/get"] == 2  # no diff_refs needed without lines


@pytest.mark.parametrize(
    ("state", "sent"),
    [("pending", "pending"), ("success", "success"), ("failure", "failed"), ("error", "failed")],
)
def test_set_status_maps_the_state(
    gitlab: FakeGitLab, client: GitLabClient, state: CommitState, sent: str
) -> None:
    project = gitlab.add_project(PROJECT)
    sha = "b" * 40
    client.set_status(PROJECT, sha, "riverbeam/review", state, "2 findings", "https://rb/j/1")
    client.set_status(PROJECT, sha, "riverbeam/review", state, "again", None)
    assert project.statuses == [
        {
            "sha": sha,
            "state": sent,
            "name": "riverbeam/review",
            "description": "2 findings",
            "target_url": "https://rb/j/1",
        },
        {"sha": sha, "state": sent, "name": "riverbeam/review", "description": "again"},
    ]


def test_the_token_file_is_read_on_each_call(
    gitlab: FakeGitLab, client: GitLabClient, token_file: Path
) -> None:
    gitlab.add_project(PROJECT, members={"ada": 30})
    assert client.permission(PROJECT, "ada") is ForgePermission.WRITE
    gitlab.tokens = {"glpat-rotated"}
    token_file.write_text("glpat-rotated")
    assert client.permission(PROJECT, "ada") is ForgePermission.WRITE
    token_file.unlink()
    with pytest.raises(ForgeCredentialsError, match=r"BEM-824.*gitlab-token"):
        client.permission(PROJECT, "ada")


def test_the_workers_use_the_built_in_client_when_a_gitlab_forge_has_a_token(
    tmp_path: Path, token_file: Path
) -> None:
    base: dict[str, object] = {
        "kind": "gitlab",
        "webhook_secret_file": tmp_path / "s",
        "bot_login": "riverbeam-bot",
        "base_url": "https://gitlab.example.org/",
        "repositories": {PROJECT: {"repository": "handbook", "project_id": 42}},
    }
    chosen = client_for("gl", ForgeConfig.model_validate({**base, "token_file": token_file}))
    assert isinstance(chosen, GitLabClient)
    assert (chosen.api, chosen.project_ids) == ("https://gitlab.example.org/api/v4", {PROJECT: 42})
    assert client_for("gl", ForgeConfig.model_validate(base)) is None  # no token: no client
    with pytest.raises(ForgeCredentialsError, match="BEM-824"):
        gitlab_client("gl", ForgeConfig.model_validate(base))


def test_open_diff_threads_are_listed_and_answered_in_place(
    gitlab: FakeGitLab, client: GitLabClient
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="docs", files=["docs/a.md"])
    merge.diffs["docs/a.md"] = "@@ -3,2 +3,2 @@\n ok\n-is done\n+does\n"
    comments = (
        LineComment(path="docs/a.md", line=4, body="Passive voice."),
        LineComment(path="docs/a.md", line=3, body="Settled."),
    )
    client.post_review(PROJECT, merge.iid, merge.sha, "2 findings.", comments)
    settled = next(n for n in project.notes.values() if n.body == "Settled.")
    settled.resolved = True
    [thread] = client.review_threads(PROJECT, merge.iid)
    assert (thread.path, thread.line, thread.body) == ("docs/a.md", 4, "Passive voice.")
    client.reply_to_thread(PROJECT, merge.iid, thread.id, "Done in abc123.")
    [reply] = [n for n in project.notes.values() if n.body == "Done in abc123."]
    assert reply.discussion == thread.id and reply.iid == merge.iid
    with pytest.raises(ForgeRefused, match="404"):
        client.reply_to_thread(PROJECT, merge.iid, "f" * 40, "Lost.")
