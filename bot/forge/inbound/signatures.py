"""A delivery's proof that the forge sent it, checked on the raw body before it is parsed,
in constant time: GitHub signs the body (``X-Hub-Signature-256: sha256=<hex HMAC-SHA256>``
keyed with the webhook secret); GitLab sends the secret itself (``X-Gitlab-Token``)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from bot.core.errors import BeamError

GITHUB_PREFIX = "sha256="


def read_secret(path: Path) -> bytes:
    """The webhook secret, read on each delivery (a rotated file takes effect at once):
    BEM-803 when it cannot be read or is empty. The path is named, the secret never."""
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise BeamError(
            "BEM-803", f"cannot read the webhook secret file {path}: {error.strerror}"
        ) from None
    if not secret:
        raise BeamError("BEM-803", f"the webhook secret file {path} is empty")
    return secret


def github_signature(secret: bytes, body: bytes) -> str:
    return GITHUB_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def check_github(secret: bytes, body: bytes, header: str | None) -> None:
    """BEM-800 unless ``header`` is the body's HMAC-SHA256 with ``secret``."""
    if not header:
        raise BeamError("BEM-800", "no X-Hub-Signature-256 header: the delivery is not signed")
    expected = github_signature(secret, body)
    if not hmac.compare_digest(expected.encode(), header.strip().lower().encode()):
        raise BeamError("BEM-800", "X-Hub-Signature-256 does not match the body and the secret")


def check_gitlab(secret: bytes, header: str | None) -> None:
    """BEM-800 unless ``header`` is the secret token."""
    if not header:
        raise BeamError("BEM-800", "no X-Gitlab-Token header: the delivery carries no token")
    if not hmac.compare_digest(secret, header.strip().encode()):
        raise BeamError("BEM-800", "X-Gitlab-Token is not this forge's webhook secret")
