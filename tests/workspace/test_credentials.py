"""Credentials: read at use from the worker's environment or files, never stored."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from pygit2.enums import CredentialType

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from sandbox.host.upstream.credentials import (
    UpstreamCallbacks,
    check_upstream_url,
    public_url,
    upstream_callbacks,
)
from tests.workspace.conftest import TOKEN_ENV

HTTPS = "https://git.example.com/docs.git"
USERPASS = CredentialType.USERPASS_PLAINTEXT
SSH = CredentialType.SSH_KEY


def _callbacks(credentials: Credentials) -> UpstreamCallbacks:
    """The callbacks a worker builds for an HTTPS repository with ``credentials``."""
    config = RepositoryConfig(upstream=HTTPS, credentials=credentials)
    return upstream_callbacks("docs", config, WorkspaceSettings())


def _code(error: pytest.ExceptionInfo[BeamError]) -> str:
    return error.value.code


def test_a_token_from_the_environment_is_read_each_time_it_is_asked_for(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    callbacks = _callbacks(Credentials(token_env=TOKEN_ENV, username="bot"))

    first = callbacks.credentials(HTTPS, None, USERPASS)
    monkeypatch.setenv(TOKEN_ENV, "rotated-token")
    second = callbacks.credentials(HTTPS, None, USERPASS)

    assert isinstance(first, pygit2.UserPass)
    assert first.credential_tuple == ("bot", token)
    assert second.credential_tuple == ("bot", "rotated-token")


def test_a_missing_environment_variable_is_bem_343(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)

    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials(token_env=TOKEN_ENV))
    assert _code(caught) == "BEM-343"
    assert TOKEN_ENV in caught.value.message


def test_a_token_that_disappears_after_the_check_is_bem_343_at_use(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    callbacks = _callbacks(Credentials(token_env=TOKEN_ENV))
    monkeypatch.delenv(TOKEN_ENV)

    with pytest.raises(BeamError) as caught:
        callbacks.credentials(HTTPS, None, USERPASS)
    assert _code(caught) == "BEM-343"


def test_a_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("file-token\n")

    callbacks = _callbacks(Credentials(token_file=secret))

    assert callbacks.credentials(HTTPS, None, USERPASS).credential_tuple == (
        "x-access-token",
        "file-token",
    )


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_missing_or_empty_token_file_is_bem_343(tmp_path: Path, content: str | None) -> None:
    secret = tmp_path / "token"
    if content is not None:
        secret.write_text(content)

    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials(token_file=secret))
    assert _code(caught) == "BEM-343"
    assert str(secret) in caught.value.message


def test_a_missing_ssh_key_is_bem_343(tmp_path: Path) -> None:
    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials(ssh_key=tmp_path / "id_ed25519"))
    assert _code(caught) == "BEM-343"


def test_an_ssh_key_is_passed_by_path(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    callbacks = _callbacks(Credentials(ssh_key=key))

    without_pub = callbacks.credentials("ssh://git@host/docs.git", "git", SSH)
    (tmp_path / "id_ed25519.pub").write_text("ssh-ed25519 AAAA\n")
    with_pub = callbacks.credentials("ssh://host/docs.git", None, SSH)

    assert isinstance(without_pub, pygit2.Keypair)
    assert without_pub.credential_tuple == ("git", None, str(key), "")
    assert with_pub.credential_tuple == ("git", str(key) + ".pub", str(key), "")


def test_a_credential_of_the_wrong_kind_for_the_transport_is_bem_343(
    token: str, tmp_path: Path
) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials(token_env=TOKEN_ENV)).credentials(HTTPS, None, SSH)
    assert _code(caught) == "BEM-343"
    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials(ssh_key=key)).credentials(HTTPS, None, USERPASS)
    assert _code(caught) == "BEM-343"


def test_an_upstream_asking_when_nothing_is_configured_is_bem_343() -> None:
    with pytest.raises(BeamError) as caught:
        _callbacks(Credentials()).credentials(HTTPS, None, USERPASS)
    assert _code(caught) == "BEM-343"


def test_messages_are_redacted(token: str) -> None:
    callbacks = _callbacks(Credentials(token_env=TOKEN_ENV))

    text = callbacks.redact(f"failed: https://bot:{token}@host/x.git said {token}")

    assert token not in text
    assert text == "failed: https://***@host/x.git said ***"
    assert public_url("https://bot:pw@host/x.git") == "https://host/x.git"


def test_an_upstream_url_with_a_password_is_a_configuration_error() -> None:
    check_upstream_url("ssh://git@host/docs.git")
    check_upstream_url("/srv/git/docs.git")
    with pytest.raises(BeamError) as caught:
        check_upstream_url("https://bot:secret@host/docs.git")
    assert _code(caught) == "BEM-900"
    assert "secret" not in caught.value.message


def test_a_certificate_check_the_callbacks_cannot_read_is_refused_even_if_valid() -> None:
    """Called from anywhere but pygit2's certificate callback, there is no certificate to
    read: the connection is refused (BEM-347), whatever ``valid`` says."""
    callbacks = _callbacks(Credentials())

    with pytest.raises(BeamError) as caught:
        callbacks.certificate_check(None, True, b"git.example.com")

    assert _code(caught) == "BEM-347"
