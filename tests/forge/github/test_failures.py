"""How the GitHub client fails: what is retried later (and after how long), what is refused,
the total deadline against a server that drips, and no secret in any error, log or repr."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from bot.core.errors import ForgeClientError, ForgeRefused, ForgeRetryLater
from bot.forge.clients.github_api import GitHubApp, GitHubClient, TokenFile
from harness.fake_github import SECONDARY_LIMIT_MESSAGE, FakeGitHub
from harness.stub_model import Reply, StubModel
from tests.forge.github.conftest import APP_ID, INSTALLATION, REPO, TOKEN, AppKey, Clock
from tests.forge.slow_servers import DripBody, Dripping


@pytest.mark.parametrize(
    ("status", "headers", "message", "code", "seconds"),
    [
        (502, {}, "Server Error", "BEM-821", None),
        (503, {"Retry-After": "7"}, "Service Unavailable", "BEM-821", 7.0),
        (403, {"Retry-After": "30"}, SECONDARY_LIMIT_MESSAGE, "BEM-825", 30.0),
        # GitHub's documented wait when a secondary limit names none: a minute.
        (403, {}, SECONDARY_LIMIT_MESSAGE, "BEM-825", 60.0),
        (429, {"Retry-After": "5"}, "Too many requests", "BEM-825", 5.0),
    ],
)
def test_what_is_retried_later_and_when(
    github: FakeGitHub,
    client: GitHubClient,
    status: int,
    headers: dict[str, str],
    message: str,
    code: str,
    seconds: float | None,
) -> None:
    repository = github.add_repository(REPO)
    number = github.add_issue(repository, "Write the install page")
    github.fail("issues/create-comment", status, headers=headers, message=message)
    with pytest.raises(ForgeRetryLater) as caught:
        client.post_comment(REPO, number, "Queued.")
    assert caught.value.code == code
    assert caught.value.retry_after_seconds == seconds
    assert str(status) in caught.value.message
    # Retried, it lands, once: nothing was posted by the failed call.
    client.post_comment(REPO, number, "Queued.")
    assert [c.body for c in repository.comments.values()] == ["Queued."]


def test_the_primary_limit_waits_for_its_reset(
    github: FakeGitHub, token_file: Path, clock: Clock
) -> None:
    client = GitHubClient(TokenFile(token_file), base_url=github.url, clock=clock)
    github.add_repository(REPO, collaborators={"ada": "write"})
    reset = int(clock.now) + 120
    limit = {
        "X-RateLimit-Limit": "5000",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(reset),
    }
    github.fail("*", 403, headers=limit, message="API rate limit exceeded for installation ID 77.")
    with pytest.raises(ForgeRetryLater, match="BEM-826") as caught:
        client.permission(REPO, "ada")
    assert caught.value.retry_after_seconds == reset - clock.now


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, "Not Found"),
        (422, "Validation Failed"),
        (403, "Resource not accessible by integration"),
    ],
)
def test_what_is_refused_is_not_retried(
    github: FakeGitHub, client: GitHubClient, status: int, message: str
) -> None:
    github.add_repository(REPO)
    github.fail("repos/create-commit-status", status, message=message)
    with pytest.raises(ForgeRefused, match="BEM-823") as caught:
        client.set_status(REPO, "b" * 40, "riverbeam/review", "success", "ok", None)
    assert not isinstance(caught.value, ForgeRetryLater)
    assert message in caught.value.message


def test_an_unreachable_forge_is_retried_later(token_file: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = GitHubClient(TokenFile(token_file), base_url=f"http://127.0.0.1:{port}", deadline=3)
    with pytest.raises(ForgeRetryLater, match=r"BEM-820.*could not be reached") as caught:
        client.permission(REPO, "ada")
    assert caught.value.retry_after_seconds is None


def test_a_dripping_server_is_cut_by_the_total_deadline(
    dripping: Dripping, token_file: Path
) -> None:
    client = GitHubClient(
        TokenFile(token_file), base_url=f"http://127.0.0.1:{dripping.port}", deadline=2.5
    )
    started = time.monotonic()
    with pytest.raises(ForgeRetryLater, match=r"BEM-820.*within 2\.5 s"):
        client.permission(REPO, "ada")
    # Each byte comes within any read timeout; only the whole call's deadline ends it.
    assert 2.5 <= time.monotonic() - started < 4.0


def test_a_body_that_drips_is_cut_too(token_file: Path) -> None:
    with StubModel() as stub:
        stub.enqueue(DripBody())
        client = GitHubClient(TokenFile(token_file), base_url=stub.origin, deadline=2)
        started = time.monotonic()
        with pytest.raises(ForgeRetryLater, match="BEM-820"):
            client.permission(REPO, "ada")
        assert time.monotonic() - started < 3.5


def test_a_reply_that_is_not_githubs(token_file: Path) -> None:
    with StubModel() as stub:
        stub.enqueue(Reply("<html>a proxy's login page</html>", content_type="text/html"))
        client = GitHubClient(TokenFile(token_file), base_url=stub.origin, deadline=5)
        with pytest.raises(ForgeRefused, match=r"BEM-829.*not JSON"):
            client.permission(REPO, "ada")


def test_the_next_page_never_goes_to_another_host(github: FakeGitHub, client: GitHubClient) -> None:
    repository = github.add_repository(REPO)
    pull = github.add_pull(repository, head="many", files=[f"f{i}" for i in range(150)])
    github.next_link_base = "http://127.0.0.2:9"
    with pytest.raises(ForgeRefused, match=r"BEM-829.*another host"):
        client.changed_paths(REPO, pull.number)
    assert len(github.requests) == 1


def test_no_secret_in_an_error_a_log_or_a_repr(
    github: FakeGitHub,
    token_file: Path,
    app_key: AppKey,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    github.add_app(APP_ID, app_key.public_pem)
    repository = github.add_repository(REPO, installation=INSTALLATION)
    number = github.add_issue(repository, "Write the install page")
    by_token = GitHubClient(TokenFile(token_file), base_url=github.url, clock=clock)
    by_app = GitHubClient(GitHubApp(APP_ID, app_key.path), base_url=github.url, clock=clock)
    errors: list[ForgeClientError] = []
    for client in (by_token, by_app):
        client.post_comment(REPO, number, "Queued.")
        for status in (401, 403, 404, 429, 502):
            github.fail("*", status, message="Bad credentials" if status == 401 else "no")
            with pytest.raises(ForgeClientError) as caught:
                client.post_comment(REPO, number, "Running.")
            errors.append(caught.value)
    token_file.write_text("")
    with pytest.raises(ForgeClientError) as caught:
        by_token.post_comment(REPO, number, "Running.")
    errors.append(caught.value)
    secrets = [TOKEN, *(m.token for m in github.minted)]
    secrets += [line for line in app_key.private_pem.decode().splitlines() if "PRIVATE" not in line]
    assert len(github.minted) >= 1
    shown = "\n".join(
        [caplog.text, repr(by_token), repr(by_app), repr(by_app.credentials)]
        + [f"{e!s} {e!r} {e.to_dict()}" for e in errors]
    )
    assert {e.code for e in errors} >= {"BEM-827", "BEM-823", "BEM-825", "BEM-821", "BEM-824"}
    for secret in secrets:
        assert secret not in shown
