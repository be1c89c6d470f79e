"""Upstream credentials and host keys, resolved on the worker when libgit2 asks for them.

A repository's ``Credentials`` name a *source* (an environment variable, a file, an SSH key
path), never a secret. ``upstream_callbacks`` checks that the source is there (BEM-343 when it
is not, before any network traffic) and returns pygit2 callbacks that read the secret again
each time libgit2 asks, so a rotated token is picked up and nothing is cached on disk. The
callbacks are only ever handed to network calls made from host-owned repositories (the mirror);
no repository config Riverbeam writes holds a credential or a URL with a password in it.

The same callbacks check who answers. For HTTPS, libgit2's own certificate verification
(the system's CA bundle) decides. For SSH, the host key the server presented must be pinned
in the repository's known_hosts file (``sandbox.host.upstream.known_hosts``): an unknown key is
BEM-344, a changed one BEM-345, and the connection ends before authentication, so nothing is
fetched or pushed. pygit2 hands its certificate callback no certificate, so the key is read
from the ``git_cert_hostkey`` libgit2 passed to pygit2's C callback (``_presented``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import pygit2
import pygit2.callbacks
from pygit2.enums import CredentialType

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from sandbox.host.upstream.known_hosts import HOST_KEY_MAX_BYTES, HostKey, SshEndpoint, ssh_endpoint
from sandbox.host.upstream.known_hosts import verify as verify_host_key

__all__ = [
    "HOST_KEY_CODES",
    "UpstreamAccess",
    "UpstreamCallbacks",
    "check_upstream_url",
    "public_url",
    "scan_host_key",
    "upstream_access",
    "upstream_callbacks",
]

# A token file is a few hundred bytes at most; a bigger file is a misconfiguration, not a token.
MAX_TOKEN_BYTES = 64 << 10
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")

_Credential = pygit2.UserPass | pygit2.Keypair

# The refusals of an SSH server whose host key is not the pinned one, or cannot be checked.
HOST_KEY_CODES = frozenset({"BEM-344", "BEM-345", "BEM-346", "BEM-347"})

# libgit2's git_cert_t and git_cert_ssh_t (include/git2/cert.h).
_CERT_HOSTKEY_LIBSSH2 = 2
_CERT_SSH_SHA256 = 1 << 2
_CERT_SSH_RAW = 1 << 3
# The Python function behind pygit2's C certificate callback; its frame holds libgit2's cert.
_PYGIT2_CERTIFICATE_CALLBACK = getattr(pygit2.callbacks._certificate_check_cb, "__wrapped__", None)


class _GitCertHostkey(ctypes.Structure):
    """libgit2's ``git_cert_hostkey`` (since 1.2; pygit2 1.21 bundles 1.9), parent included.
    ``_presented`` checks the SHA-256 libgit2 computed against the raw key it read, so a
    layout that does not match this one is refused, never misread into a trusted key."""

    _fields_ = (
        ("cert_type", ctypes.c_int),
        ("type", ctypes.c_int),
        ("hash_md5", ctypes.c_ubyte * 16),
        ("hash_sha1", ctypes.c_ubyte * 20),
        ("hash_sha256", ctypes.c_ubyte * 32),
        ("raw_type", ctypes.c_int),
        ("hostkey", ctypes.c_void_p),
        ("hostkey_len", ctypes.c_size_t),
    )


@dataclass(frozen=True)
class UpstreamAccess:
    """How the worker reaches one repository's upstream: where, with what, trusting what."""

    repo_name: str
    url: str
    credentials: Credentials
    known_hosts: Path


def upstream_access(
    repo_name: str, repo_config: RepositoryConfig, workspaces: WorkspaceSettings
) -> UpstreamAccess:
    """The repository's own known_hosts file if it has one, else the service's."""
    return UpstreamAccess(
        repo_name,
        repo_config.upstream,
        repo_config.credentials,
        repo_config.known_hosts or workspaces.known_hosts,
    )


class UpstreamCallbacks(pygit2.RemoteCallbacks):
    """pygit2 callbacks that answer libgit2's credential requests from one ``Credentials``
    and accept only the server identity the repository trusts."""

    def __init__(self, access: UpstreamAccess) -> None:
        super().__init__()
        self.access = access
        self._source = access.credentials

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

    def certificate_check(self, certificate: None, valid: bool, host: bytes) -> bool:
        cert_type, key = _presented()
        if cert_type != _CERT_HOSTKEY_LIBSSH2 or key is None:
            # TLS: libgit2's verification against the system's CA bundle decides.
            return bool(valid)
        # ``valid`` for SSH reflects the worker user's ~/.ssh/known_hosts: not ours to trust.
        access = self.access
        verify_host_key(
            access.known_hosts, _connected_endpoint(access, host), key, access.repo_name
        )
        return True

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


def upstream_callbacks(
    repo_name: str, repo_config: RepositoryConfig, workspaces: WorkspaceSettings
) -> UpstreamCallbacks:
    """Callbacks for the repository's upstream, or BEM-343 now if its secret cannot be read."""
    access = upstream_access(repo_name, repo_config, workspaces)
    source = access.credentials
    if source.ssh_key is not None:
        _require_key(source.ssh_key)
    elif source.token_env is not None or source.token_file is not None:
        read_token(source)
    return UpstreamCallbacks(access)


def scan_host_key(access: UpstreamAccess) -> tuple[SshEndpoint, HostKey]:
    """Connect to the SSH upstream and return the host key it presents, as the workers see it
    (libgit2 negotiates the key type). The connection ends at the key: nothing is
    authenticated, sent or read. BEM-348 for an upstream that is not SSH or cannot be reached.
    """
    endpoint = ssh_endpoint(access.url)
    if endpoint is None:
        raise BeamError(
            "BEM-348",
            f"the upstream of {access.repo_name!r}, {public_url(access.url)}, is not an SSH "
            "URL: it has no host key to trust (HTTPS upstreams are verified against the "
            "system's certificate authorities)",
        )
    scan, failure = _KeyScan(), ""
    with tempfile.TemporaryDirectory(prefix="riverbeam-keyscan-") as scratch:
        remote = pygit2.init_repository(scratch, bare=True).remotes.create_anonymous(access.url)
        try:
            remote.connect(callbacks=scan)
        except pygit2.GitError as error:  # the scan refuses every key, so it always ends here
            failure = str(error)
    if scan.key is None:
        raise BeamError(
            "BEM-348",
            f"no SSH host key was read from {endpoint}: {public_url(failure)}. Check the "
            "upstream URL and that the host is reachable from this machine.",
        )
    return endpoint, scan.key


class _KeyScan(pygit2.RemoteCallbacks):
    """Keeps the SSH host key the server presents, then ends the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.key: HostKey | None = None

    def certificate_check(self, certificate: None, valid: bool, host: bytes) -> bool:
        cert_type, key = _presented()
        if cert_type == _CERT_HOSTKEY_LIBSSH2:
            self.key = key
        return False


def _presented() -> tuple[int, HostKey | None]:
    """libgit2's certificate type and, for SSH, the host key, read from the certificate libgit2
    passed to pygit2's C callback (two frames up: pygit2 calls ``certificate_check``, which
    calls this). BEM-347 if it is not there or does not check out."""
    frame: FrameType | None = sys._getframe(2)
    if _PYGIT2_CERTIFICATE_CALLBACK is None or frame is None:
        raise _unreadable("pygit2 does not expose its certificate callback")
    if frame.f_code is not _PYGIT2_CERTIFICATE_CALLBACK.__code__ or "cert_i" not in frame.f_locals:
        raise _unreadable("pygit2's certificate callback is not the one this release reads")
    address = int(pygit2.ffi.cast("uintptr_t", frame.f_locals["cert_i"]))
    cert = _GitCertHostkey.from_address(address)
    if cert.cert_type != _CERT_HOSTKEY_LIBSSH2:
        return cert.cert_type, None
    wanted = _CERT_SSH_RAW | _CERT_SSH_SHA256
    if cert.type & wanted != wanted or not 0 < cert.hostkey_len <= HOST_KEY_MAX_BYTES:
        raise _unreadable("libgit2 passed no raw host key")
    blob = ctypes.string_at(cert.hostkey, cert.hostkey_len)
    if hashlib.sha256(blob).digest() != bytes(cert.hash_sha256):
        raise _unreadable("the host key libgit2 passed does not match its own SHA-256")
    try:
        return cert.cert_type, HostKey(blob)
    except ValueError:
        raise _unreadable("the server's host key is not an SSH public key") from None


def _connected_endpoint(access: UpstreamAccess, host: bytes) -> SshEndpoint:
    """The endpoint of the upstream URL, which must be the host libgit2 reports connecting to."""
    endpoint = ssh_endpoint(access.url)
    connected = host.decode("utf-8", "replace").strip("[]").lower()
    if endpoint is None or endpoint.host.strip("[]").lower() != connected:
        raise _unreadable(
            f"libgit2 connected over SSH to {connected!r}, which is not the host of "
            f"{public_url(access.url)}; write the upstream as ssh://[user@]host[:port]/path"
        )
    return endpoint


def _unreadable(why: str) -> BeamError:
    return BeamError(
        "BEM-347",
        f"the SSH host key cannot be checked ({why}), so the connection was refused before "
        "anything was sent or received",
    )


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
