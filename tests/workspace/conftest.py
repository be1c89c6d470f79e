"""Fixtures for workspaces and the relay: a bare upstream, settings, a token in the env."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from harness.gitkit import make_upstream, traversable_dir
from sandbox.host.workspace.bases import BASES

TOKEN_ENV = "RIVERBEAM_TEST_UPSTREAM_TOKEN"


@pytest.fixture
def base_dir() -> Iterator[Path]:
    with traversable_dir("riverbeam-ws-test-") as path:
        yield path


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv(TOKEN_ENV, value)
    return value


@pytest.fixture
def upstream(base_dir: Path) -> Path:
    return make_upstream(base_dir / "upstream.git")


@pytest.fixture(params=["auto", "never"], ids=["views", "checkouts"])
def settings(base_dir: Path, request: pytest.FixtureRequest) -> WorkspaceSettings:
    """Both ways of laying out a job's tree: a view of the base (this host may mount) and a
    checkout of its own."""
    return WorkspaceSettings(
        root=base_dir / "workspaces", mirrors=base_dir / "mirrors", views=request.param
    )


def bases_named(settings: WorkspaceSettings, repo: str) -> list[str]:
    """The commits that have a base under the root, for ``repo``: none with checkouts."""
    directory = settings.root / BASES / repo
    return sorted(os.listdir(directory)) if directory.is_dir() else []


@pytest.fixture
def repo_config(upstream: Path, token: str) -> RepositoryConfig:
    # A local path never asks for the token; the HTTP tests show it is sent when asked.
    return RepositoryConfig(upstream=str(upstream), credentials=Credentials(token_env=TOKEN_ENV))


def assert_secret_absent(secret: str, *roots: Path) -> None:
    """No file under ``roots`` (symlinks not followed) contains ``secret``."""
    needle = secret.encode()
    for root in roots:
        for directory, _dirs, files in os.walk(root):
            for name in files:
                path = Path(directory, name)
                if path.is_symlink():
                    continue
                assert needle not in path.read_bytes(), f"{path} contains the token"
