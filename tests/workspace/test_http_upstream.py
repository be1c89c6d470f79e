"""Against a token-protected HTTP upstream: the token is sent when asked and stored nowhere."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.git_http import GitHttpServer, basic, self_signed
from harness.gitkit import git, refs_and_logs, sandbox_push
from sandbox.host.relay import RelayResult, relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.host.workspace.prepare import Workspace, prepare_workspace
from tests.workspace.conftest import TOKEN_ENV, assert_secret_absent

USER = "riverbeam-bot"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


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


_SYNC_SCRIPT = """
import sys
from pathlib import Path
from bot.config import RepositoryConfig, WorkspaceSettings
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.host.upstream.mirror import sync_mirror
config = RepositoryConfig(upstream=sys.argv[1])
settings = WorkspaceSettings(root=Path(sys.argv[2]), mirrors=Path(sys.argv[2]) / "mirrors")
print(sync_mirror("docs", config, settings))
"""


def test_an_https_upstream_is_verified_against_the_certificate_authorities(
    upstream: Path, settings: WorkspaceSettings, base_dir: Path
) -> None:
    tls = self_signed(base_dir)
    with GitHttpServer(upstream.parent, tls=tls) as server:
        config = RepositoryConfig(upstream=server.url_for(upstream))

        with pytest.raises(BeamError) as caught:
            sync_mirror("docs", config, settings)
        # A worker whose CA bundle holds the certificate fetches the same URL: the refusal
        # above is the certificate check, not a broken server.
        trusting = subprocess.run(
            [sys.executable, "-c", _SYNC_SCRIPT, config.upstream, str(base_dir / "trusting")],
            env={**os.environ, "SSL_CERT_FILE": str(tls.certificate)},
            capture_output=True,
            text=True,
            check=False,
            cwd=PROJECT_ROOT,
        )

    assert caught.value.code == "BEM-340"
    assert "certificate" in caught.value.message
    assert not (settings.mirrors / "docs.git" / "refs" / "heads" / "main").exists()
    assert trusting.returncode == 0, trusting.stderr
    assert (base_dir / "trusting" / "mirrors" / "docs.git" / "refs" / "heads" / "main").exists()
