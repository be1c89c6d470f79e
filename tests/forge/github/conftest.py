"""A fake GitHub (``harness.fake_github``) per test, held to ``api.github.com.json``, and the
clients that talk to it: with a fine-grained token, or as a GitHub App whose RSA key is made
here. Each test's validated requests, replies and operations are the run's figures; a test
ends with no violation: a test that provokes one reads and clears ``violations``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.config import Settings
from bot.forge.clients.github_api import GitHubApp, GitHubClient, TokenFile
from bot.store.store import JobStore
from harness import figures
from harness.fake_github import FakeGitHub, Repository
from harness.redis_server import redis_server
from tests.forge.kit import BOT, GITHUB_REPO

TOKEN = "github_pat_11AAAAAAA0fake0token0for0the0tests"
APP_ID = 4242
INSTALLATION = 77
REPO = "octo/docs"


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


@pytest.fixture
def github(request: pytest.FixtureRequest, clock: Clock) -> Iterator[FakeGitHub]:
    with FakeGitHub(clock=clock) as fake:
        fake.tokens.add(TOKEN)
        yield fake
    node = request.node
    figures.count(
        node, "github requests validated against api.github.com.json", fake.validated_requests
    )
    figures.count(
        node, "github replies validated against api.github.com.json", fake.validated_replies
    )
    for operation, times in fake.operations.items():
        figures.count(node, f"github operation {operation}", times)
    assert fake.violations == [], "a request or reply that api.github.com.json does not allow"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "github-token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def client(github: FakeGitHub, token_file: Path) -> GitHubClient:
    return GitHubClient(TokenFile(token_file), base_url=github.url, deadline=5)


@dataclass(frozen=True)
class AppKey:
    private_pem: bytes
    public_pem: bytes
    path: Path


@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def app_key(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> AppKey:
    private = rsa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = tmp_path / "app.pem"
    path.write_bytes(private)
    return AppKey(private, public, path)


@pytest.fixture
def app_client(github: FakeGitHub, app_key: AppKey, clock: Clock) -> GitHubClient:
    github.add_app(APP_ID, app_key.public_pem)
    return GitHubClient(
        GitHubApp(APP_ID, app_key.path), base_url=github.url, deadline=5, clock=clock
    )


@pytest.fixture
def settings(github: FakeGitHub, token_file: Path) -> Settings:
    forge = {
        "kind": "github",
        "base_url": github.url,
        "token_file": str(token_file),
        "webhook_secret_file": "/nonexistent",
        "bot_login": BOT,
        "repositories": {GITHUB_REPO: {"repository": "docs"}},
    }
    return Settings.model_validate(
        {"repositories": {"docs": {"upstream": "/nonexistent"}}, "forges": {"gh": forge}}
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    with redis_server(tmp_path) as url:
        jobs = JobStore.from_url(url, prefix="rbtest-replies")
        yield jobs
        jobs.gateway.client.close()


@pytest.fixture
def thread(github: FakeGitHub) -> Repository:
    repository = github.add_repository(GITHUB_REPO)
    repository.issues[1] = "Write the install page"
    return repository
