"""The fake's judge can fail: requests that GitLab's documented shapes do not allow are
caught (answered 400 and kept in ``violations``), and so is a reply the fake would send
wrong, so the client tests' passing means something."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from harness import gitlab_shapes
from harness.fake_gitlab import FakeGitLab
from tests.forge.gitlab_client.conftest import PROJECT, TOKEN

ENCODED = PROJECT.replace("/", "%2F")
HEADERS = {"PRIVATE-TOKEN": TOKEN}
FORM = "application/x-www-form-urlencoded"


def _sent(gitlab: FakeGitLab, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {**HEADERS, **kw.pop("headers", {})}
    return httpx.request(method, gitlab.url + path, headers=headers, timeout=5, **kw)


@pytest.mark.parametrize(
    ("method", "path", "extra", "said"),
    [
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/merge_requests",
            {"json": {"source_branch": "h", "target_branch": "main", "title": "t", "body": "x"}},
            "'body' was unexpected",  # GitHub's field name: GitLab's is description
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/merge_requests",
            {"json": {"source_branch": "h", "title": "t"}},
            "'target_branch' is a required property",
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/issues/1/notes",
            {"json": {}},
            "'body' is a required property",
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/statuses/{'a' * 40}",
            {"json": {"state": "failure"}},  # GitHub's state: GitLab's is failed
            "'failure' is not one of",
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/statuses/{'a' * 40}",
            {"json": {"state": "success", "name": "a", "context": "b"}},
            "should not be valid",
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/merge_requests/1/discussions",
            {
                "json": {
                    "body": "x",
                    "position": {
                        "base_sha": "a" * 40,
                        "start_sha": "a" * 40,
                        "head_sha": "b" * 40,
                        "position_type": "text",
                        "new_path": "docs/a.md",
                        "new_line": 3,
                    },
                }
            },
            "'old_path' is a required property",  # the page asks for both paths
        ),
        (
            "GET",
            f"/api/v4/projects/{ENCODED}/merge_requests/1/diffs",
            {"params": {"perpage": "100"}},
            "'perpage' was unexpected",
        ),
        (
            "GET",
            f"/api/v4/projects/{ENCODED}/merge_requests/1/diffs",
            {"params": {"per_page": "500"}},
            "does not match",  # at most 100 a page
        ),
        (
            "GET",
            f"/api/v4/projects/{ENCODED}/merge_requests",
            {"params": {"state": "open"}},  # GitHub's word: GitLab's is opened
            "'open' is not one of",
        ),
        (
            "GET",
            "/api/v4/projects/docs-team/guides/handbook/merge_requests/1",
            {},
            "no endpoint",  # the path not URL-encoded: slashes are segments
        ),
        (
            "GET",
            f"/api/v4/projects/{ENCODED}/merge_requests/one",
            {},
            "is no integer",
        ),
        (
            "PUT",
            f"/api/v4/projects/{ENCODED}/merge_requests/1/notes/5",
            {
                "content": b"body=x",
                "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            },
            "a body sent as",
        ),
        (
            "POST",
            f"/api/v4/projects/{ENCODED}/merge_requests/1/approve",
            {},
            "no endpoint",  # and the client never asks it: a bot never approves
        ),
    ],
)
def test_a_request_the_docs_do_not_allow_is_refused(
    gitlab: FakeGitLab, method: str, path: str, extra: dict[str, Any], said: str
) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_merge(project, source_branch="docs")
    reply = _sent(gitlab, method, path, **extra)
    assert reply.status_code == 400
    assert said in reply.json()["error"]
    assert len(gitlab.violations) == 1 and said in gitlab.violations[0]
    assert gitlab.validated_requests == 0
    gitlab.violations.clear()


def test_a_valid_request_without_a_token_is_gitlabs_401(gitlab: FakeGitLab) -> None:
    gitlab.add_project(PROJECT)
    reply = httpx.get(f"{gitlab.url}/api/v4/users", params={"username": "ada"}, timeout=5)
    assert (reply.status_code, reply.json()) == (401, {"message": "401 Unauthorized"})
    assert gitlab.validated_requests == gitlab.validated_replies == 1


def test_a_reply_the_docs_do_not_allow_is_caught(
    gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="docs")
    wrong = {"draft": "no"}  # a boolean in the docs
    real = gitlab.merge_document
    monkeypatch.setattr(gitlab, "merge_document", lambda *a, **k: {**real(*a, **k), **wrong})
    reply = _sent(gitlab, "GET", f"/api/v4/projects/{ENCODED}/merge_requests/{merge.iid}")
    assert reply.status_code == 500
    assert gitlab.violations == [
        "reply: merge_requests/get reply 200: at draft: 'no' is not of type 'boolean'"
    ]
    gitlab.violations.clear()


def test_every_endpoint_cites_its_page_and_every_page_is_gitlabs() -> None:
    assert len({e.id for e in gitlab_shapes.ENDPOINTS}) == len(gitlab_shapes.ENDPOINTS)
    for endpoint in gitlab_shapes.ENDPOINTS:
        assert endpoint.docs.startswith("https://docs.gitlab.com/api/"), endpoint.id
        # Strict: no query or body attribute the fake does not know passes.
        assert endpoint.query["additionalProperties"] is False
        assert endpoint.body is None or endpoint.body["additionalProperties"] is False
