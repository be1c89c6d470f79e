"""The GitHub App flow against the fake: an RS256 JWT (verified by the fake with the App's
public key) finds the repository's installation and mints an installation token, which is
cached, and renewed five minutes before it expires."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.core.errors import ForgeCredentialsError, ForgeRefused
from bot.forge.clients.github_api import GitHubApp, GitHubClient
from bot.forge.permissions import ForgePermission
from harness.fake_github import FakeGitHub, Minted
from tests.forge.github.conftest import APP_ID, INSTALLATION, REPO, AppKey, Clock


def test_the_jwt_finds_the_installation_and_mints_a_token(
    github: FakeGitHub, app_client: GitHubClient, app_key: AppKey, clock: Clock
) -> None:
    github.add_repository(REPO, collaborators={"ada": "write"}, installation=INSTALLATION)
    assert app_client.permission(REPO, "ada") is ForgePermission.WRITE
    found, minted, asked = github.requests
    assert (found.operation, minted.operation) == (
        "apps/get-repo-installation",
        "apps/create-installation-access-token",
    )
    assert minted.path == f"/app/installations/{INSTALLATION}/access_tokens"
    claims = jwt.decode(
        found.authorization.removeprefix("Bearer "),  # type: ignore[union-attr]
        app_key.public_pem,
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == str(APP_ID)
    assert claims["iat"] == int(clock.now) - 60  # backdated against clock drift
    assert claims["exp"] - claims["iat"] <= 600
    (token,) = github.minted
    assert asked.authorization == f"Bearer {token.token}"


def test_the_token_is_cached_then_renewed_before_it_expires(
    github: FakeGitHub, app_client: GitHubClient, clock: Clock
) -> None:
    github.add_repository(REPO, collaborators={"ada": "write"}, installation=INSTALLATION)
    for _ in range(3):
        app_client.permission(REPO, "ada")
    assert len(github.minted) == 1
    clock.now += 3600 - 6 * 60  # six minutes left: still good
    app_client.permission(REPO, "ada")
    assert len(github.minted) == 1
    clock.now += 2 * 60  # four minutes left: renewed before GitHub would refuse it
    app_client.permission(REPO, "ada")
    assert len(github.minted) == 2
    assert github.requests[-1].authorization == f"Bearer {github.minted[1].token}"
    # The installation was asked once: it is cached by repository.
    assert github.operations["apps/get-repo-installation"] == 1


def test_an_expired_token_that_github_refuses_is_not_reused(
    github: FakeGitHub, app_client: GitHubClient, clock: Clock
) -> None:
    github.add_repository(REPO, collaborators={"ada": "write"}, installation=INSTALLATION)
    app_client.permission(REPO, "ada")
    # GitHub no longer takes it (revoked, or the clocks disagree), though it looks fresh.
    github.minted[0] = Minted(INSTALLATION, github.minted[0].token, clock.now)
    with pytest.raises(ForgeRefused, match="BEM-827"):
        app_client.permission(REPO, "ada")
    assert app_client.permission(REPO, "ada") is ForgePermission.WRITE
    assert len(github.minted) == 2


def test_a_key_that_is_not_the_apps_is_refused(
    github: FakeGitHub, app_key: AppKey, clock: Clock
) -> None:
    github.add_repository(REPO, installation=INSTALLATION)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    github.add_app(
        APP_ID,
        other.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    client = GitHubClient(GitHubApp(APP_ID, app_key.path), base_url=github.url, clock=clock)
    with pytest.raises(ForgeRefused, match=r"BEM-827.*401"):
        client.permission(REPO, "ada")
    assert github.minted == []


def test_a_clock_ahead_makes_a_jwt_github_refuses(
    github: FakeGitHub, app_key: AppKey, clock: Clock
) -> None:
    github.add_app(APP_ID, app_key.public_pem)
    github.add_repository(REPO, installation=INSTALLATION)
    ahead = Clock(clock.now + 3600)
    client = GitHubClient(GitHubApp(APP_ID, app_key.path), base_url=github.url, clock=ahead)
    with pytest.raises(ForgeRefused, match="BEM-827"):
        client.permission(REPO, "ada")


def test_no_installation_on_the_repository(github: FakeGitHub, app_client: GitHubClient) -> None:
    github.add_repository(REPO)
    with pytest.raises(ForgeRefused, match="BEM-828"):
        app_client.post_comment(REPO, 1, "hello")


def test_an_installation_token_reaches_only_its_installation(
    github: FakeGitHub, app_client: GitHubClient
) -> None:
    github.add_repository(REPO, collaborators={"ada": "write"}, installation=INSTALLATION)
    other = github.add_repository("someone/else", collaborators={"ada": "admin"}, installation=78)
    assert app_client.permission(REPO, "ada") is ForgePermission.WRITE
    assert app_client.permission(other.full_name, "ada") is ForgePermission.ADMIN
    assert sorted(m.installation for m in github.minted) == [INSTALLATION, 78]


@pytest.mark.parametrize("content", [None, b"", b"not a key at all\n"])
def test_an_unreadable_or_bad_key_file(
    github: FakeGitHub, clock: Clock, tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "app.pem"
    if content is not None:
        path.write_bytes(content)
    github.add_repository(REPO, installation=INSTALLATION)
    client = GitHubClient(GitHubApp(APP_ID, path), base_url=github.url, clock=clock)
    with pytest.raises(ForgeCredentialsError, match="BEM-824") as caught:
        client.permission(REPO, "ada")
    assert str(path) in str(caught.value)
    assert github.requests == []  # nothing was sent
