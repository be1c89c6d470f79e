"""Sign-in sessions for the web pages, kept server-side in Redis.

The browser holds only a random session id (an HttpOnly, SameSite=Lax cookie). Redis keeps,
under ``<jobs.prefix>:session:<sha256(id)>`` and for ``api.session_hours``, the digest of the
token that signed in and the session's CSRF token. The token itself is never stored: each
request looks its holder up by digest, so a token removed from the config ends its sessions.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from pydantic import BaseModel, ConfigDict

from bot.config import Settings
from bot.errors import BeamError

SESSION_COOKIE = "riverbeam_session"
# Before sign-in there is no session: the sign-in form's CSRF token is a double-submit
# cookie, compared with the form's hidden field.
SIGN_IN_COOKIE = "riverbeam_sign_in"
SIGN_IN_SECONDS = 3600


class SessionData(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    token_sha256: str
    csrf: str


@dataclass(frozen=True)
class Session:
    id: str
    data: SessionData


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class SessionStore:
    def __init__(self, client: redis.Redis, *, prefix: str, lifetime_seconds: int) -> None:
        self._redis = client
        self._prefix = prefix
        self.lifetime_seconds = lifetime_seconds

    @classmethod
    def for_settings(cls, settings: Settings) -> SessionStore:
        client = redis.Redis.from_url(
            settings.redis_url, socket_connect_timeout=5.0, socket_timeout=10.0
        )
        lifetime = max(1, round(settings.api.session_hours * 3600))
        return cls(client, prefix=settings.jobs.prefix, lifetime_seconds=lifetime)

    def _key(self, session_id: str) -> str:
        # Hashed, so whoever reads Redis cannot use the ids it finds there as cookies.
        return f"{self._prefix}:session:{hashlib.sha256(session_id.encode()).hexdigest()}"

    def create(self, token_sha256: str) -> Session:
        session = Session(new_secret(), SessionData(token_sha256=token_sha256, csrf=new_secret()))
        with _reachable():
            self._redis.set(
                self._key(session.id), session.data.model_dump_json(), ex=self.lifetime_seconds
            )
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session with this id; None once it expired or was signed out."""
        if not session_id or len(session_id) > 100:
            return None
        with _reachable():
            raw = self._redis.get(self._key(session_id))
        if raw is None:
            return None
        return Session(session_id, SessionData.model_validate_json(raw))

    def delete(self, session_id: str) -> None:
        with _reachable():
            self._redis.delete(self._key(session_id))


@contextmanager
def _reachable() -> Iterator[None]:
    try:
        yield
    except redis.RedisError as error:
        # The message names the failure, never the URL, which may carry a password.
        raise BeamError(
            "BEM-504", f"the session store (Redis) is unreachable: {type(error).__name__}"
        ) from None
