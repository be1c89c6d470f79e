"""A fake GitLab (``harness.fake_gitlab``) per test, held to the shapes of GitLab's API
documentation, and the client that talks to it with a project access token. Each test's
validated requests, replies and endpoints are the run's figures; a test ends with no
violation: a test that provokes one reads and clears ``violations``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.forge.clients.gitlab_api import GitLabClient
from harness import figures
from harness.fake_gitlab import FakeGitLab

TOKEN = "glpat-0fake0project0token0for0tests"
PROJECT = "docs-team/guides/handbook"


@pytest.fixture
def gitlab(request: pytest.FixtureRequest) -> Iterator[FakeGitLab]:
    with FakeGitLab() as fake:
        fake.tokens.add(TOKEN)
        yield fake
    node = request.node
    figures.count(
        node, "gitlab requests validated against GitLab's API docs", fake.validated_requests
    )
    figures.count(
        node, "gitlab replies validated against GitLab's API docs", fake.validated_replies
    )
    for endpoint, times in fake.operations.items():
        figures.count(node, f"gitlab endpoint {endpoint}", times)
    assert fake.violations == [], "a request or reply that GitLab's documentation does not allow"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "gitlab-token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def client(gitlab: FakeGitLab, token_file: Path) -> GitLabClient:
    return GitLabClient(token_file, base_url=gitlab.url, deadline=5)
