"""Upstream credentials, resolved on the worker at the moment libgit2 asks for them.

A repository's ``Credentials`` name a *source* (an environment variable, a file, an SSH key
path), never a secret. ``upstream_callbacks`` checks that the source is there (BEM-343 when it
is not, before any network traffic) and returns pygit2 callbacks that read the secret again
each time libgit2 asks, so a rotated token is picked up and nothing is cached on disk. The
callbacks are only ever handed to network calls made from host-owned repositories (the mirror);
no repository config Riverbeam writes holds a credential or a URL with a password in it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pygit2
from pygit2.enums import CredentialType

from bot.config import Credentials
from bot.errors import BeamError

__all__ = ["UpstreamCallbacks", "check_upstream_url", "public_url", "upstream_callbacks"]

# A token file is a few hundred bytes at most; a bigger file is a misconfiguration, not a token.
MAX_TOKEN_BYTES = 64 << 10
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")

_Credential = pygit2.UserPass | pygit2.Keypair


class UpstreamCallbacks(pygit2.RemoteCallbacks):
    """pygit2 callbacks that answer libgit2's credential requests from one ``Credentials``."""

    def __init__(self, source: Credentials) -> None:
        super().__init__()
        self._source = source

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> _Credential:
        source = self._source
        if source.ssh_key is not None:
            return self._keypair(source.ssh_key, username_from_url, allowed_types)
        if source.token_env is None and source.token_file is None:
            raise BeamError(
                "BEM-343",
                f"{public_url(url)} asks for credentials and none are configured for this "
                "repository; set credentials.token_env, token_file or ssh_key",
            )
        if not allowed_types & CredentialType.USERPASS_PLAINTEXT:
            raise BeamError(
                "BEM-343",
                f"{public_url(url)} does not accept a token (it asks for {allowed_types!r}); "
                "configure credentials.ssh_key for SSH upstreams",
            )
        return pygit2.UserPass(source.username, read_token(source))

    def redact(self, text: str) -> str:
        """``text`` with any URL userinfo and the current token replaced by ``***``."""
        text = _USERINFO.sub(r"\g<scheme>***@", text)
        token = _token_or_none(self._source)
        return text.replace(token, "***") if token else text

    @staticmethod
    def _keypair(
        key: Path, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Keypair:
        if not allowed_types & CredentialType.SSH_KEY:
            raise BeamError(
                "BEM-343",
                f"the upstream does not accept an SSH key (it asks for {allowed_types!r}); "
                "configure credentials.token_env or token_file for HTTPS upstreams",
            )
        _require_key(key)
        public = key.with_name(key.name + ".pub")
        # libssh2 derives the public half from the private key when no .pub file is there.
        return pygit2.Keypair(
            username_from_url or "git", str(public) if public.is_file() else None, str(key), ""
        )


def upstream_callbacks(source: Credentials) -> UpstreamCallbacks:
    """Callbacks for ``source``, or BEM-343 now if its secret cannot be read."""
    if source.ssh_key is not None:
        _require_key(source.ssh_key)
    elif source.token_env is not None or source.token_file is not None:
        read_token(source)
    return UpstreamCallbacks(source)


def read_token(source: Credentials) -> str:
    """The token ``source`` names, read now; BEM-343 when it is missing or empty."""
    if source.token_env is not None:
        token = os.environ.get(source.token_env, "").strip()
        if not token:
            raise BeamError(
                "BEM-343",
                f"the environment variable {source.token_env} holding the upstream token is "
                "unset or empty on this worker; export it for the worker process",
            )
        return token
    if source.token_file is not None:
        return _read_token_file(source.token_file)
    raise BeamError("BEM-343", "this repository has no token configured")


def check_upstream_url(url: str) -> None:
    """Refuse an upstream URL that carries a password: it would end up in logs and configs."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        raise BeamError(
            "BEM-900",
            f"the upstream {public_url(url)} embeds a password; move it to credentials.token_env "
            "or credentials.token_file",
        )


def public_url(url: str) -> str:
    """``url`` without its userinfo, safe for messages and logs."""
    return _USERINFO.sub(r"\g<scheme>", url)


def _read_token_file(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as error:
        raise BeamError(
            "BEM-343",
            f"the upstream token file {path} cannot be read on this worker ({error.strerror})",
        ) from None
    token = raw.decode("utf-8", "replace").strip()
    if not token or len(raw) > MAX_TOKEN_BYTES:
        raise BeamError(
            "BEM-343", f"the upstream token file {path} is empty or too large to be a token"
        )
    return token


def _token_or_none(source: Credentials) -> str | None:
    if source.token_env is None and source.token_file is None:
        return None
    try:
        return read_token(source)
    except BeamError:
        return None


def _require_key(key: Path) -> None:
    if not key.is_file() or not os.access(key, os.R_OK):
        raise BeamError(
            "BEM-343",
            f"the SSH key {key} is missing or unreadable on this worker; install it there "
            "(it never leaves the worker)",
        )
