"""SSH host keys of the upstreams, checked against the ``known_hosts`` file Riverbeam is given.

An SSH upstream is trusted only through a host key the operator pinned: a repository's
``known_hosts`` file, else the service's ``workspaces.known_hosts``. The worker's own
``~/.ssh/known_hosts`` never makes a key trusted. The file is OpenSSH's format, read again at
every connection (so a key pinned by ``riverbeam repos trust`` counts at once):

- ``host``, ``[host]:port`` (any port but 22), comma-separated lists, ``*`` and ``?``
  wildcards, ``!negated`` names;
- hashed names (``|1|salt|hash``, as ``ssh-keygen -H`` writes them);
- ``@revoked`` lines: a key listed there is refused even if listed as trusted too.
  ``@cert-authority`` lines are skipped: libgit2 does not present host certificates.

A key is compared whole (its wire-format blob), never by a hash of it alone.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bot.core.errors import BeamError

__all__ = [
    "KNOWN_HOSTS_MAX_BYTES",
    "HostKey",
    "Lookup",
    "SshEndpoint",
    "Verdict",
    "lookup",
    "pin",
    "ssh_endpoint",
    "verify",
]

# Larger than any real known_hosts file (a line is under 1 KiB); bounds what a check reads.
KNOWN_HOSTS_MAX_BYTES = 4 << 20
# An OpenSSH public key blob is a few hundred bytes (RSA 16384 bits is about 2 KiB).
HOST_KEY_MAX_BYTES = 16 << 10
_SSH_SCHEMES = frozenset({"ssh", "ssh+git", "git+ssh"})
# scp-like ``[user@]host:path`` or ``[user@][v6-address]:path``, as libgit2 reads them.
_SCP_LIKE = re.compile(r"(?:[^@/]+@)?(?:\[(?P<bracketed>[^\]/]+)\]|(?P<host>[^:/\[\]@]+)):.*")
_KEY_LABELS = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ssh-dss": "DSA"}


@dataclass(frozen=True)
class SshEndpoint:
    """Where an SSH upstream is: the host as written in its URL, and the port."""

    host: str
    port: int = 22

    @property
    def name(self) -> str:
        """The name OpenSSH files the host under: ``host``, or ``[host]:port`` off port 22."""
        host = self.host.lower()
        return host if self.port == 22 else f"[{host}]:{self.port}"

    def __str__(self) -> str:
        return self.host if self.port == 22 else f"{self.host} port {self.port}"


def ssh_endpoint(url: str) -> SshEndpoint | None:
    """The host and port of an SSH upstream URL; None for any other kind of upstream.

    ``ssh://`` (and ``ssh+git://``, ``git+ssh://``) URLs, and scp-like ``user@host:path``,
    which libgit2 also speaks over SSH unless the text names an existing local directory.
    """
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() not in _SSH_SCHEMES:
            return None
        try:
            port = parts.port or 22
        except ValueError:
            return None
        return SshEndpoint(parts.hostname, port) if parts.hostname else None
    if ":" not in url or Path(url).is_dir():
        return None
    found = _SCP_LIKE.fullmatch(url)
    if found is None:
        return None
    return SshEndpoint(found.group("bracketed") or found.group("host"))


@dataclass(frozen=True)
class HostKey:
    """A host's public key, as the SSH wire-format blob the server sent."""

    blob: bytes
    key_type: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_type", _blob_type(self.blob))

    @classmethod
    def from_base64(cls, text: str) -> HostKey:
        """A key from the base64 field of a ``known_hosts`` or ``.pub`` line."""
        try:
            return cls(base64.b64decode(text, validate=True))
        except binascii.Error:
            raise ValueError("the key is not valid base64") from None

    @property
    def fingerprint(self) -> str:
        """``SHA256:…``, exactly as ``ssh-keygen -l`` and ``ssh`` print it."""
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode()
        return "SHA256:" + digest.rstrip("=")

    @property
    def label(self) -> str:
        """The key's kind as OpenSSH names it in messages: ``ED25519``, ``ECDSA``, ``RSA``."""
        if self.key_type.startswith("ecdsa-sha2-"):
            return "ECDSA"
        return _KEY_LABELS.get(self.key_type, self.key_type)

    def known_hosts_line(self, endpoint: SshEndpoint) -> str:
        return f"{endpoint.name} {self.key_type} {base64.b64encode(self.blob).decode()}"


class Verdict(enum.Enum):
    TRUSTED = "trusted"
    UNKNOWN = "unknown"
    CHANGED = "changed"
    REVOKED = "revoked"


@dataclass(frozen=True)
class Pinned:
    """One ``known_hosts`` line that names the host: where it is and the key it pins."""

    line: int
    key: HostKey


@dataclass(frozen=True)
class Lookup:
    """What ``known_hosts`` says about a key a host presented."""

    verdict: Verdict
    file_exists: bool
    # Lines for the host with a key of the presented type that is not the presented key
    # (CHANGED), or the @revoked line that lists it (REVOKED).
    conflicts: tuple[Pinned, ...] = ()
    # Key types the file lists for the host, when none is of the presented type.
    other_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Entry:
    line: int
    marker: str | None
    patterns: str
    key: HostKey


def lookup(known_hosts: Path, endpoint: SshEndpoint, key: HostKey) -> Lookup:
    """Whether ``known_hosts`` trusts ``key`` for ``endpoint``; BEM-346 if it cannot be read."""
    text = _read(known_hosts)
    if text is None:
        return Lookup(Verdict.UNKNOWN, file_exists=False)
    entries = [entry for entry in _entries(text) if _names(entry.patterns, endpoint.name)]
    revoked = [entry for entry in entries if entry.marker == "@revoked" and entry.key == key]
    if revoked:
        return Lookup(Verdict.REVOKED, True, (Pinned(revoked[0].line, key),))
    plain = [entry for entry in entries if entry.marker is None]
    if any(entry.key == key for entry in plain):
        return Lookup(Verdict.TRUSTED, True)
    same_type = tuple(
        Pinned(entry.line, entry.key) for entry in plain if entry.key.key_type == key.key_type
    )
    if same_type:
        return Lookup(Verdict.CHANGED, True, same_type)
    others = tuple(sorted({entry.key.key_type for entry in plain}))
    return Lookup(Verdict.UNKNOWN, True, other_types=others)


def pin(known_hosts: Path, endpoint: SshEndpoint, key: HostKey) -> None:
    """Add the line that trusts ``key`` for ``endpoint`` to ``known_hosts`` (created if need be).

    One ``write`` on a file opened for appending, so two pins at once never interleave.
    """
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    line = key.known_hosts_line(endpoint) + "\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        fd = os.open(known_hosts, flags, 0o644)
    except OSError as error:
        raise _unusable(known_hosts, error) from None
    try:
        size = os.fstat(fd).st_size
        if size and not _ends_with_newline(known_hosts, size):
            line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(known_hosts: Path) -> str | None:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(known_hosts, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _unusable(known_hosts, error) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BeamError(
            "BEM-346",
            f"the known_hosts file {known_hosts} is not a regular file; point known_hosts "
            "at a file",
        )
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(KNOWN_HOSTS_MAX_BYTES + 1)
    if len(raw) > KNOWN_HOSTS_MAX_BYTES:
        raise BeamError(
            "BEM-346",
            f"the known_hosts file {known_hosts} is over {KNOWN_HOSTS_MAX_BYTES >> 20} MiB; "
            "that is not a list of host keys",
        )
    return raw.decode("utf-8", "replace")


def _unusable(known_hosts: Path, error: OSError) -> BeamError:
    return BeamError(
        "BEM-346",
        f"the known_hosts file {known_hosts} cannot be used on this worker "
        f"({error.strerror or error}); make it a readable (and, to pin keys, writable) file",
    )


def _ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1) == b"\n"


def _entries(text: str) -> list[_Entry]:
    """The usable lines; a line that is not a host key (a typo, an unknown format) is skipped,
    as OpenSSH does: it can only make a host unknown, never trusted."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if marker not in (None, "@revoked") or len(fields) < 3:
            continue
        patterns, key_type, encoded = fields[:3]
        try:
            key = HostKey.from_base64(encoded)
        except ValueError:
            continue
        if key.key_type == key_type:
            entries.append(_Entry(number, marker, patterns, key))
    return entries


def _names(patterns: str, name: str) -> bool:
    """Whether a line's host field names ``name``: a hashed name, or OpenSSH's pattern list
    (a negated pattern that matches rules the line out)."""
    if patterns.startswith("|"):
        return _hashed_name_matches(patterns, name)
    matched = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if _glob(pattern.removeprefix("!"), name):
            if negated:
                return False
            matched = True
    return matched


def _hashed_name_matches(field: str, name: str) -> bool:
    parts = field.split("|")
    # ``|1|salt|hash``: HMAC-SHA1 of the name keyed with the salt; no other scheme exists.
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        expected = base64.b64decode(parts[3], validate=True)
    except binascii.Error:
        return False
    actual = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(actual, expected)


def _glob(pattern: str, name: str) -> bool:
    # Only '*' and '?' are special: '[' and ']' are literal, as in "[host]:2222".
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    return re.fullmatch(regex, name, re.DOTALL) is not None


def _blob_type(blob: bytes) -> str:
    """The key type a wire-format blob starts with (a length-prefixed ASCII name)."""
    if not 4 < len(blob) <= HOST_KEY_MAX_BYTES:
        raise ValueError("not an SSH public key")
    (length,) = struct.unpack(">I", blob[:4])
    name = blob[4 : 4 + length]
    if not 0 < length <= 64 or len(name) != length or not re.fullmatch(rb"[a-z0-9@.+-]+", name):
        raise ValueError("not an SSH public key")
    return name.decode()


def verify(known_hosts: Path, endpoint: SshEndpoint, key: HostKey, repo_name: str) -> None:
    """Return if ``known_hosts`` trusts ``key`` for ``endpoint``; else BEM-344 (not pinned)
    or BEM-345 (another key pinned, or this one revoked), saying how to go on."""
    found = lookup(known_hosts, endpoint, key)
    offered = f"{endpoint} offered the {key.label} host key {key.fingerprint}"
    closed = "The connection was closed before anything was sent or received."
    if found.verdict is Verdict.TRUSTED:
        return
    if found.verdict is Verdict.UNKNOWN:
        if not found.file_exists:
            why = "does not exist"
        elif found.other_types:
            why = f"pins only {', '.join(found.other_types)} keys for {endpoint.name}"
        else:
            why = f"has no entry for {endpoint.name}"
        raise BeamError(
            "BEM-344",
            f"the SSH host key of the upstream of {repo_name!r} is not trusted: {offered}, "
            f"and the known_hosts file {known_hosts} {why}. {closed} If {key.fingerprint} is "
            "the server's key (ask its administrator, who can print it with `ssh-keygen -lf` "
            "on the server's host key), pin it with "
            f"`riverbeam repos trust {repo_name} --fingerprint {key.fingerprint}`.",
        )
    conflict = found.conflicts[0]
    if found.verdict is Verdict.REVOKED:
        pinned = f"line {conflict.line} of {known_hosts} revokes that key"
    else:
        pinned = (
            f"line {conflict.line} of {known_hosts} pins {conflict.key.fingerprint} "
            f"for {endpoint.name}"
        )
    raise BeamError(
        "BEM-345",
        f"the SSH host key of the upstream of {repo_name!r} has CHANGED: {offered}, but "
        f"{pinned}. Someone may be intercepting the connection, or the server's key was "
        f"replaced. {closed} Only once the server's administrator confirms the new key: "
        f"remove the old entry (`ssh-keygen -f {known_hosts} -R '{endpoint.name}'`) and run "
        f"`riverbeam repos trust {repo_name}`.",
    )
