"""The fake's judge can fail: requests and replies that api.github.com.json does not allow
are caught, so the client tests' passing means something."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bot.core.errors import ForgeRefused, ForgeRetryLater
from bot.forge.clients.github_api import GitHubClient
from harness.fake_github import FakeGitHub
from harness.forges import diff_shows
from harness.github_openapi import Violation, description
from tests.forge.github.conftest import REPO, TOKEN

HEADERS = {
    "Accept": "application/vnd.github+json",
    "X-GitHub-Api-Version": "2022-11-28",
    "User-Agent": "test",
    "Authorization": f"Bearer {TOKEN}",
}


def _sent(github: FakeGitHub, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {**HEADERS, **kw.pop("headers", {})}
    return httpx.request(method, github.url + path, headers=headers, timeout=5, **kw)


@pytest.mark.parametrize(
    ("method", "path", "extra", "said"),
    [
        (
            "POST",
            "/repos/octo/docs/pulls",
            {"json": {"title": "t", "head": "h", "base": "main", "bodyy": "x"}},
            "'bodyy' was unexpected",
        ),
        (
            "POST",
            "/repos/octo/docs/pulls/1/reviews",
            {"json": {"event": "LGTM"}},
            "'LGTM' is not one of",
        ),
        (
            "POST",
            "/repos/octo/docs/issues/1/comments",
            {"json": {}},
            "'body' is a required property",
        ),
        (
            "POST",
            "/repos/octo/docs/statuses/abc",
            {"json": {"state": "success", "target_url": 5}},
            "5 is not of type",
        ),
        (
            "GET",
            "/repos/octo/docs/pulls/1/files",
            {"params": {"perpage": "100"}},
            "'perpage' is not declared",
        ),
        ("GET", "/repos/octo/docs/pulls/one", {}, "pull_number='one' is not an integer"),
        (
            "GET",
            "/repos/octo/docs/pulls",
            {"params": {"state": "merged"}},
            "'merged' is not one of",
        ),
        ("GET", "/repos/octo/docs/no-such-thing", {}, "is no operation"),
        ("PUT", "/repos/octo/docs/issues/comments/1", {"json": {"body": "x"}}, "is no operation"),
        (
            "GET",
            "/repos/octo/docs/pulls",
            {"headers": {"X-GitHub-Api-Version": "2020-01-01"}},
            "X-GitHub-Api-Version",
        ),
        ("GET", "/repos/octo/docs/pulls", {"headers": {"Accept": "application/json"}}, "Accept"),
    ],
)
def test_a_request_the_description_does_not_allow_is_refused(
    github: FakeGitHub, method: str, path: str, extra: dict[str, Any], said: str
) -> None:
    github.add_repository(REPO)
    reply = _sent(github, method, path, **extra)
    assert reply.status_code == 400, reply.text
    (violation,) = github.violations
    assert said in violation
    assert github.validated_requests == 0
    github.violations.clear()


def test_a_client_that_breaks_the_schema_is_refused_through_it(
    github: FakeGitHub, client: GitHubClient
) -> None:
    github.add_repository(REPO)
    with pytest.raises(ForgeRefused, match="BEM-823"):
        client.set_status(REPO, "c" * 40, "riverbeam/review", "passed", "", None)  # type: ignore[arg-type]
    assert "'passed' is not one of" in github.violations.pop()


def test_a_reply_the_description_does_not_allow_is_caught(
    github: FakeGitHub, client: GitHubClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = github.add_repository(REPO)
    pull = github.add_pull(repository, head="x")
    real = FakeGitHub.pull_document

    def without_head(self: FakeGitHub, *args: Any, **kw: Any) -> Any:
        document = real(self, *args, **kw)
        del document["head"]
        return document

    monkeypatch.setattr(FakeGitHub, "pull_document", without_head)
    # The fake does not send it: it answers 500, and keeps the violation for the test.
    with pytest.raises(ForgeRetryLater, match=r"BEM-821.*sent an invalid reply"):
        client.pull_request(REPO, pull.number)
    assert "'head' is a required property" in github.violations.pop()


def test_githubs_own_example_can_fail_its_schema() -> None:
    # The description's pull request example lists a team without its required "type":
    # the judge is strict enough to catch GitHub's own slip (the fake sends no teams).
    judge = description()
    operation = judge.operation("GET", "/repos/o/r/pulls/1")
    with pytest.raises(Violation, match=r"requested_teams/0.*'type' is a required property"):
        judge.check_reply(operation, 200, judge.example("#/components/examples/pull-request"))


def test_the_fake_takes_a_review_comment_only_on_a_line_of_its_side_of_the_diff() -> None:
    patch = "@@ -5,3 +7,2 @@\n keep\n-gone\n-also\n+new"
    assert diff_shows(patch) == {7, 8}
    assert diff_shows(patch, "LEFT") == {5, 6, 7}
