"""Each method of the GitHub client against the fake, whose every exchange is checked
against api.github.com.json (the fixture fails a test that sent anything it does not allow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import ForgeConfig
from bot.core.errors import ForgeCredentialsError, ForgeRefused
from bot.forge.clients.choice import client_for
from bot.forge.clients.contract import CommentRef, ForgeClient, LineComment
from bot.forge.clients.github_api import GitHubApp, GitHubClient, TokenFile, github_client
from bot.forge.clients.gitlab_api import GitLabClient
from bot.forge.permissions import ForgePermission
from harness.fake_github import FakeGitHub
from harness.forges import FakeLookup
from tests.forge.github.conftest import REPO, TOKEN


def test_the_client_is_a_forge_client(client: GitHubClient) -> None:
    def takes(forge: ForgeClient) -> ForgeClient:
        return forge

    assert takes(client) is client  # mypy checks the protocol here


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("read", ForgePermission.READ),
        ("triage", ForgePermission.TRIAGE),
        ("write", ForgePermission.WRITE),
        ("maintain", ForgePermission.MAINTAIN),
        ("admin", ForgePermission.ADMIN),
        ("docs-editor", ForgePermission.READ),  # a custom role GitHub does not name
    ],
)
def test_permission_is_the_collaborator_role(
    github: FakeGitHub, client: GitHubClient, role: str, expected: ForgePermission
) -> None:
    github.add_repository(REPO, collaborators={"ada": role})
    assert client.permission(REPO, "ada") is expected


def test_no_collaborator_is_no_permission(github: FakeGitHub, client: GitHubClient) -> None:
    github.add_repository(REPO, collaborators={"ada": "write"})
    assert client.permission(REPO, "mallory") is ForgePermission.NONE
    assert github.requests[-1].path == f"/repos/{REPO}/collaborators/mallory/permission"


def test_a_login_cannot_step_into_another_path(github: FakeGitHub, client: GitHubClient) -> None:
    github.add_repository(REPO, collaborators={"ada": "admin"})
    # Quoted whole: "../../x" is one (unknown) login, not a walk up the API's paths.
    assert client.permission(REPO, "../../pulls/1") is ForgePermission.NONE
    with pytest.raises(ForgeRefused, match="BEM-823"):
        client.permission("no-slash", "ada")


def test_pull_request_same_repository_and_fork(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    own = github.add_pull(repository, head="riverbeam/job-1", title="Docs", body="Fixes it")
    fork = github.add_pull(repository, head="patch-1", from_fork=True, author="eve")
    found = client.pull_request(REPO, own.number)
    assert (found.number, found.title, found.body, found.author) == (
        own.number,
        "Docs",
        "Fixes it",
        "ada",
    )
    assert (found.head_ref, found.base_ref, found.head_sha) == (
        "riverbeam/job-1",
        "main",
        own.head_sha,
    )
    assert found.url == f"https://github.com/{REPO}/pull/{own.number}"
    assert not found.from_fork
    assert client.pull_request(REPO, fork.number).from_fork
    with pytest.raises(ForgeRefused, match=r"BEM-823.*404"):
        client.pull_request(REPO, 999)


def test_changed_paths_follow_every_page(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    files = [f"docs/page-{i:03}.md" for i in range(250)]
    pull = github.add_pull(repository, head="many", files=files)
    assert list(client.changed_paths(REPO, pull.number)) == files
    pages = [r for r in github.requests if r.operation == "pulls/list-files"]
    assert len(pages) == 3  # 100 a page, by the Link header's next


def test_thread_is_every_comment_in_order(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    number = github.add_issue(repository, "Write the install page")
    for i in range(130):
        github.add_comment(repository, number, f"user{i % 3}", f"comment {i}")
    thread = client.thread(REPO, number)
    assert [c.body for c in thread] == [f"comment {i}" for i in range(130)]
    assert thread[4].author == "user1"


def test_a_comment_is_posted_then_edited_in_place(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    number = github.add_issue(repository, "Write the install page")
    ref = client.post_comment(REPO, number, "Queued.")
    assert isinstance(ref, CommentRef) and ref.number == number
    assert ref.url.endswith(f"/issues/{number}#issuecomment-{ref.id}")
    client.edit_comment(REPO, ref, "Running.")
    assert [c.body for c in repository.comments.values()] == ["Running."]
    with pytest.raises(ForgeRefused, match="404"):
        client.edit_comment(REPO, ref.model_copy(update={"id": 5}), "gone")


def test_a_pull_request_is_found_opened_and_updated(
    github: FakeGitHub, client: GitHubClient
) -> None:
    repository = github.add_repository(REPO)
    # A fork's branch of the same name is not Riverbeam's.
    github.add_pull(repository, head="riverbeam/job-7", from_fork=True)
    assert client.find_pull_request(REPO, "riverbeam/job-7", "main") is None
    opened = client.open_pull_request(
        REPO, "riverbeam/job-7", "main", "Add install page", "Closes #3"
    )
    assert (opened.head, opened.base) == ("riverbeam/job-7", "main")
    assert client.find_pull_request(REPO, "riverbeam/job-7", "main") == opened
    assert client.find_pull_request(REPO, "riverbeam/job-7", "release") is None
    client.update_pull_request(REPO, opened.number, "Add the install page", "Closes #3\n\nv2")
    pull = repository.pulls[opened.number]
    assert (pull.title, pull.body) == ("Add the install page", "Closes #3\n\nv2")
    # GitHub refuses a second pull request for the branch: not retried.
    with pytest.raises(ForgeRefused, match=r"BEM-823.*422"):
        client.open_pull_request(REPO, "riverbeam/job-7", "main", "again", "")


def test_a_review_only_ever_comments(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    patches = {
        "docs/a.md": "@@ -2,2 +2,2 @@\n same\n-old\n+new",
        "docs/b.md": "@@ -9 +9 @@\n-x\n+y",
    }
    pull = github.add_pull(
        repository, head="docs-fix", files=["docs/a.md", "docs/b.md"], patches=patches
    )
    comments = (
        LineComment(path="docs/a.md", line=3, body="Broken link"),
        LineComment(path="docs/b.md", line=9, body="Old wording", side="LEFT"),
    )
    client.post_review(REPO, pull.number, pull.head_sha, "2 findings", comments)
    (review,) = repository.reviews
    assert review["event"] == "COMMENT"
    assert review["commit_id"] == pull.head_sha
    assert review["comments"][1] == {
        "path": "docs/b.md",
        "line": 9,
        "side": "LEFT",
        "body": "Old wording",
    }
    with pytest.raises(ForgeRefused, match="422"):
        client.post_review(
            REPO, pull.number, pull.head_sha, "x", (LineComment(path="src/c.py", line=1, body="?"),)
        )
    # A line the diff does not show: GitHub refuses the whole review.
    with pytest.raises(ForgeRefused, match="422"):
        client.post_review(
            REPO,
            pull.number,
            pull.head_sha,
            "x",
            (LineComment(path="docs/a.md", line=7, body="?"),),
        )
    assert len(repository.reviews) == 1


def test_commentable_lines_are_the_new_side_lines_each_file_s_patch_shows(
    github: FakeGitHub, client: GitHubClient
) -> None:
    repository = github.add_repository(REPO)
    patch = "@@ -1,3 +1,4 @@\n a\n-b\n+B\n+C\n c\n@@ -20,2 +21,2 @@\n x\n-y\n+Y"
    pull = github.add_pull(
        repository, head="docs-fix", files=["docs/a.md"], patches={"docs/a.md": patch}
    )
    lines = client.commentable_lines(REPO, pull.number)
    assert lines == {"docs/a.md": frozenset({1, 2, 3, 4, 21, 22})}


def test_a_commit_status(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    sha = "a" * 40
    client.set_status(
        REPO, sha, "riverbeam/review", "failure", "x" * 300, "https://rb.example/jobs/1"
    )
    client.set_status(REPO, sha, "riverbeam/review", "success", "2 findings fixed", None)
    first, second = repository.statuses
    assert first["sha"] == sha and first["state"] == "failure"
    assert len(first["description"]) == 140  # GitHub refuses longer
    assert "target_url" not in second


def test_github_enterprise_server_base_url(clock: object, token_file: Path) -> None:
    with FakeGitHub(prefix="/api/v3") as ghes:
        ghes.tokens.add(TOKEN)
        ghes.add_repository(REPO, collaborators={"ada": "maintain"})
        client = GitHubClient(TokenFile(token_file), base_url=ghes.url + "/", deadline=5)
        assert client.permission(REPO, "ada") is ForgePermission.MAINTAIN
        assert ghes.requests[-1].path == f"/api/v3/repos/{REPO}/collaborators/ada/permission"
        assert ghes.violations == []


def test_the_factory_reads_the_forge_table(tmp_path: Path, token_file: Path) -> None:
    base = {"kind": "github", "webhook_secret_file": tmp_path / "s", "bot_login": "riverbeam[bot]"}
    by_token = github_client("gh", ForgeConfig(**base, token_file=token_file))
    assert isinstance(by_token.credentials, TokenFile)
    assert by_token.base_url == "https://api.github.com"
    app = ForgeConfig(
        **base, app_id=9, private_key_file=tmp_path / "k.pem", base_url="https://ghe.example/api/v3"
    )
    by_app = github_client("gh", app)
    assert isinstance(by_app.credentials, GitHubApp)
    assert by_app.base_url == "https://ghe.example/api/v3"
    with pytest.raises(ForgeCredentialsError, match="BEM-824"):
        github_client("gh", ForgeConfig(**base))


def test_the_workers_use_the_built_in_client_when_a_github_forge_has_credentials(
    tmp_path: Path, token_file: Path
) -> None:
    base = {"kind": "github", "webhook_secret_file": tmp_path / "s", "bot_login": "riverbeam[bot]"}
    assert isinstance(client_for("gh", ForgeConfig(**base, token_file=token_file)), GitHubClient)
    assert client_for("gh", ForgeConfig(**base)) is None  # no credentials: no client
    named = ForgeConfig(**base, token_file=token_file, client_factory="harness.forges:no_one_may")
    assert isinstance(client_for("gh", named), FakeLookup)  # the named factory first
    gitlab = {**base, "kind": "gitlab"}
    assert isinstance(client_for("gl", ForgeConfig(**gitlab, token_file=token_file)), GitLabClient)


def test_a_worker_keeps_one_client_per_forge_table(tmp_path: Path, token_file: Path) -> None:
    base = {"kind": "github", "webhook_secret_file": tmp_path / "s", "bot_login": "riverbeam[bot]"}
    config = ForgeConfig(**base, token_file=token_file)
    assert client_for("gh", config) is client_for("gh", config.model_copy())
    assert client_for("gh", config) is not client_for(
        "gh", config.model_copy(update={"bot_login": "rb"})
    )


def test_review_threads_are_the_comments_that_reply_to_none_and_replies_go_in_them(
    github: FakeGitHub, client: GitHubClient
) -> None:
    repository = github.add_repository(REPO)
    patches = {"docs/a.md": "@@ -2,2 +2,2 @@\n same\n-old\n+new"}
    pull = github.add_pull(repository, head="docs-fix", files=["docs/a.md"], patches=patches)
    comment = LineComment(path="docs/a.md", line=3, body="Broken link")
    client.post_review(REPO, pull.number, pull.head_sha, "1 finding", (comment,))
    [thread] = client.review_threads(REPO, pull.number)
    assert (thread.path, thread.line, thread.body) == ("docs/a.md", 3, "Broken link")
    client.reply_to_thread(REPO, pull.number, thread.id, "Fixed in abc123.")
    # The reply is in the thread, and is no thread of its own.
    [reply] = [c for c in repository.review_comments.values() if c.in_reply_to is not None]
    assert (reply.in_reply_to, reply.body) == (int(thread.id), "Fixed in abc123.")
    assert [t.id for t in client.review_threads(REPO, pull.number)] == [thread.id]
