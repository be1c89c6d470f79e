"""How the GitLab client fails: what is retried later (and after how long), what is refused,
the total deadline against a server that drips, and no token in any error, log or repr."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from bot.core.errors import ForgeClientError, ForgeRefused, ForgeRetryLater
from bot.forge.clients.gitlab_api import GitLabClient
from harness.fake_gitlab import FakeGitLab
from harness.stub_model import Reply, StubModel
from tests.forge.gitlab_client.conftest import PROJECT, TOKEN
from tests.forge.slow_servers import DripBody, Dripping

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "headers", "code", "seconds"),
    [
        (500, {}, "BEM-821", None),
        (502, {}, "BEM-821", None),
        (503, {"Retry-After": "7"}, "BEM-821", 7.0),
        (429, {"Retry-After": "30", "RateLimit-Remaining": "0"}, "BEM-831", 30.0),
        # No Retry-After: GitLab's RateLimit-Reset, an epoch second.
        (429, {"RateLimit-Reset": str(int(NOW) + 45)}, "BEM-831", 45.0),
        (429, {}, "BEM-831", 60.0),
    ],
)
def test_what_is_retried_later_and_when(
    gitlab: FakeGitLab,
    token_file: Path,
    status: int,
    headers: dict[str, str],
    code: str,
    seconds: float | None,
) -> None:
    client = GitLabClient(token_file, base_url=gitlab.url, deadline=5, clock=lambda: NOW)
    project = gitlab.add_project(PROJECT)
    issue = gitlab.add_issue(project, "Write the install page")
    gitlab.fail("notes/create-issue", status, headers=headers, message="no")
    with pytest.raises(ForgeRetryLater) as caught:
        client.post_comment(PROJECT, issue, "Queued.")
    assert caught.value.code == code
    assert caught.value.retry_after_seconds == seconds
    assert str(status) in caught.value.message
    # Retried, it lands, once: nothing was posted by the failed call.
    client.post_comment(PROJECT, issue, "Queued.")
    assert [n.body for n in project.notes.values()] == ["Queued."]


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (401, "401 Unauthorized", "BEM-830"),
        (403, "403 Forbidden", "BEM-823"),
        (404, "404 Project Not Found", "BEM-823"),
        (422, "Cannot transition status via :run from :running", "BEM-823"),
    ],
)
def test_what_is_refused_is_not_retried(
    gitlab: FakeGitLab, client: GitLabClient, status: int, message: str, code: str
) -> None:
    gitlab.add_project(PROJECT)
    gitlab.fail("statuses/create", status, message=message)
    with pytest.raises(ForgeRefused) as caught:
        client.set_status(PROJECT, "b" * 40, "riverbeam/review", "success", "ok", None)
    assert caught.value.code == code
    assert not isinstance(caught.value, ForgeRetryLater)
    assert message in caught.value.message


def test_a_token_gitlab_does_not_know_is_bem_830(gitlab: FakeGitLab, client: GitLabClient) -> None:
    gitlab.add_project(PROJECT, members={"ada": 30})
    gitlab.tokens.clear()  # revoked
    with pytest.raises(ForgeRefused, match=r"BEM-830.*401 Unauthorized"):
        client.permission(PROJECT, "ada")


def test_a_project_gitlab_does_not_find(gitlab: FakeGitLab, client: GitLabClient) -> None:
    gitlab.add_user("ada")
    with pytest.raises(ForgeRefused, match=r"BEM-823.*404 Project Not Found"):
        client.permission("docs-team/elsewhere", "ada")


def test_an_unreachable_forge_is_retried_later(token_file: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = GitLabClient(token_file, base_url=f"http://127.0.0.1:{port}", deadline=3)
    with pytest.raises(ForgeRetryLater, match=r"BEM-820.*could not be reached") as caught:
        client.permission(PROJECT, "ada")
    assert caught.value.retry_after_seconds is None


def test_a_dripping_server_is_cut_by_the_total_deadline(
    dripping: Dripping, token_file: Path
) -> None:
    client = GitLabClient(token_file, base_url=f"http://127.0.0.1:{dripping.port}", deadline=2.5)
    started = time.monotonic()
    with pytest.raises(ForgeRetryLater, match=r"BEM-820.*within 2\.5 s"):
        client.permission(PROJECT, "ada")
    # Each byte comes within any read timeout; only the whole call's deadline ends it.
    assert 2.5 <= time.monotonic() - started < 4.0


def test_a_body_that_drips_is_cut_too(token_file: Path) -> None:
    with StubModel() as stub:
        stub.enqueue(DripBody())
        client = GitLabClient(token_file, base_url=stub.origin, deadline=2)
        started = time.monotonic()
        with pytest.raises(ForgeRetryLater, match="BEM-820"):
            client.pull_request(PROJECT, 1)
        assert time.monotonic() - started < 3.5


def test_a_reply_that_is_not_gitlabs(token_file: Path) -> None:
    with StubModel() as stub:
        stub.enqueue(Reply("<html>a proxy's sign-in page</html>", content_type="text/html"))
        client = GitLabClient(token_file, base_url=stub.origin, deadline=5)
        with pytest.raises(ForgeRefused, match=r"BEM-832.*not JSON"):
            client.permission(PROJECT, "ada")


def test_no_token_in_an_error_a_log_or_a_repr(
    gitlab: FakeGitLab, client: GitLabClient, token_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    project = gitlab.add_project(PROJECT)
    issue = gitlab.add_issue(project, "Write the install page")
    client.post_comment(PROJECT, issue, "Queued.")
    errors: list[ForgeClientError] = []
    for status in (401, 403, 404, 429, 502):
        gitlab.fail("*", status, message=f"{status} no")
        with pytest.raises(ForgeClientError) as caught:
            client.post_comment(PROJECT, issue, "Running.")
        errors.append(caught.value)
    token_file.write_text("")
    with pytest.raises(ForgeClientError) as caught:
        client.post_comment(PROJECT, issue, "Running.")
    errors.append(caught.value)
    assert {e.code for e in errors} == {"BEM-830", "BEM-823", "BEM-831", "BEM-821", "BEM-824"}
    # The token did go, in its header: the fake saw it on every request.
    assert {r.token for r in gitlab.requests} == {TOKEN}
    shown = "\n".join(
        [caplog.text, repr(client), str(vars(client))]
        + [f"{e!s} {e!r} {e.to_dict()}" for e in errors]
    )
    assert TOKEN not in shown
