"""Sign-in sessions for the web pages, kept server-side in Redis.

The browser holds only a random session id (an HttpOnly, SameSite=Lax cookie). Redis keeps,
under ``<jobs.prefix>:session:<sha256(id)>`` and for ``api.session_hours``, the digest of the
token that signed in and the session's CSRF token. The token itself is never stored: each
request looks its holder up by digest, so a token removed from the config ends its sessions.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from bot.config import Settings
from bot.store.gateway import RedisGateway

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
    """Sessions in the job store's Redis, through its gateway: its key prefix and outage
    handling."""

    def __init__(self, gateway: RedisGateway, *, lifetime_seconds: int) -> None:
        self._gateway = gateway
        self.lifetime_seconds = lifetime_seconds

    @classmethod
    def for_service(cls, gateway: RedisGateway, settings: Settings) -> SessionStore:
        return cls(gateway, lifetime_seconds=max(1, round(settings.api.session_hours * 3600)))

    def _key(self, session_id: str) -> str:
        # Hashed, so whoever reads Redis cannot use the ids it finds there as cookies.
        return self._gateway.keys.session(session_id)

    def create(self, token_sha256: str) -> Session:
        session = Session(new_secret(), SessionData(token_sha256=token_sha256, csrf=new_secret()))
        with self._gateway.reachable():
            self._gateway.client.set(
                self._key(session.id), session.data.model_dump_json(), ex=self.lifetime_seconds
            )
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session with this id; None once it expired or was signed out."""
        if not session_id or len(session_id) > 100:
            return None
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._key(session_id))
        if raw is None:
            return None
        try:
            data = SessionData.model_validate_json(raw)
        except ValueError:
            return None  # a damaged session signs no one in: sign in again
        return Session(session_id, data)

    def delete(self, session_id: str) -> None:
        with self._gateway.reachable():
            self._gateway.client.delete(self._key(session_id))
