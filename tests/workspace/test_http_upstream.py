"""Against a token-protected HTTP upstream: the token is sent when asked and stored nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.errors import BeamError
from sandbox.workspace.credentials import upstream_callbacks
from sandbox.workspace.prepare import Workspace, prepare_workspace
from sandbox.workspace.relay import RelayResult, relay_push
from tests.support.git_http import GitHttpServer, basic
from tests.workspace.conftest import TOKEN_ENV, assert_secret_absent
from tests.workspace.kit import git, refs_and_logs, sandbox_push

USER = "riverbeam-bot"


@pytest.fixture
def server(upstream: Path, token: str) -> Iterator[GitHttpServer]:
    with GitHttpServer(upstream.parent, authorization=basic(USER, token)) as running:
        yield running


@pytest.fixture
def http_config(server: GitHttpServer, upstream: Path) -> RepositoryConfig:
    return RepositoryConfig(
        upstream=server.url_for(upstream),
        credentials=Credentials(token_env=TOKEN_ENV, username=USER),
    )


def _relay(workspace: Workspace, approved: str, config: RepositoryConfig) -> RelayResult:
    """Push the approved commit upstream, with the callbacks the worker builds."""
    return relay_push(
        workspace,
        approved,
        workspace.branch,
        config,
        callbacks=upstream_callbacks("docs", config, WorkspaceSettings()),
    )


def _pre_receive(upstream: Path, script: str) -> None:
    """Install a ``pre-receive`` hook on the bare upstream running ``script`` in sh."""
    hook = upstream / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)


def test_the_token_reaches_the_server_and_no_file(
    server: GitHttpServer,
    upstream: Path,
    token: str,
    http_config: RepositoryConfig,
    settings: WorkspaceSettings,
) -> None:
    workspace = prepare_workspace("http-1", "docs", http_config, None, settings)
    approved = sandbox_push(workspace, {"docs/http.md": "Over HTTP.\n"})

    result = _relay(workspace, approved, http_config)

    assert result.pushed
    assert refs_and_logs(upstream)[f"refs/heads/{workspace.branch}"] == approved
    assert basic(USER, token) in server.seen_authorizations
    assert_secret_absent(token, settings.root, settings.mirrors)


def test_a_wrong_token_is_bem_340_and_the_message_carries_no_secret(
    server: GitHttpServer,
    token: str,
    http_config: RepositoryConfig,
    settings: WorkspaceSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "wrong-" + token)

    with pytest.raises(BeamError) as caught:
        prepare_workspace("http-2", "docs", http_config, None, settings)

    assert caught.value.code == "BEM-340"
    assert token not in caught.value.message
    assert basic(USER, "wrong-" + token) in server.seen_authorizations


def test_a_push_the_server_refuses_is_bem_353(
    server: GitHttpServer,
    upstream: Path,
    http_config: RepositoryConfig,
    settings: WorkspaceSettings,
) -> None:
    workspace = prepare_workspace("http-3", "docs", http_config, None, settings)
    approved = sandbox_push(workspace, {"docs/x.md": "x\n"})
    _pre_receive(upstream, "echo 'branch is frozen' >&2\nexit 1\n")
    before = refs_and_logs(upstream)

    with pytest.raises(BeamError) as caught:
        _relay(workspace, approved, http_config)

    assert caught.value.code == "BEM-353"
    assert refs_and_logs(upstream) == before


def test_a_push_that_races_another_is_bem_351(
    server: GitHttpServer,
    upstream: Path,
    http_config: RepositoryConfig,
    settings: WorkspaceSettings,
) -> None:
    workspace = prepare_workspace("http-4", "docs", http_config, None, settings)
    approved = sandbox_push(workspace, {"docs/x.md": "x\n"})
    # Someone else's push lands while ours is on the wire: the hook moves the branch first.
    other = git("-C", str(upstream), "rev-parse", "refs/heads/docs/old")
    # Written as a file: git forbids ref updates from inside the pre-receive quarantine.
    ref = upstream / "refs" / "heads" / workspace.branch
    _pre_receive(upstream, f"mkdir -p {ref.parent}\necho {other} > {ref}\n")

    with pytest.raises(BeamError) as caught:
        _relay(workspace, approved, http_config)

    assert caught.value.code == "BEM-351"
    assert other in caught.value.message and approved in caught.value.message
