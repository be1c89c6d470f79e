"""Who is looking at a page: the signed-in visitor behind the session cookie, and the CSRF
check every form post passes before anything else happens."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Form, Request

from bot.core.errors import BeamError
from bot.http.deps import ServiceDep
from bot.service.access import Principal
from bot.web.sessions import SESSION_COOKIE, Session, SessionStore


@dataclass(frozen=True)
class Visitor:
    who: Principal
    session: Session

    @property
    def csrf(self) -> str:
        return self.session.data.csrf


def get_sessions(request: Request) -> SessionStore:
    sessions: SessionStore = request.app.state.web_sessions
    return sessions


SessionsDep = Annotated[SessionStore, Depends(get_sessions)]


def get_visitor(request: Request, service: ServiceDep, sessions: SessionsDep) -> Visitor:
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if not session_id:
        raise BeamError("BEM-708", "sign in with your token to see this page")
    session = sessions.get(session_id)
    if session is None:
        raise BeamError("BEM-708", "your sign-in expired or you signed out; sign in again")
    try:
        who = service.tokens.for_digest(session.data.token_sha256)
    except BeamError:
        sessions.delete(session_id)
        raise BeamError(
            "BEM-708", "the token you signed in with is no longer accepted; ask an admin"
        ) from None
    return Visitor(who, session)


VisitorDep = Annotated[Visitor, Depends(get_visitor)]


def same_secret(sent: str, expected: str) -> bool:
    return hmac.compare_digest(sent.encode(), expected.encode())


def get_form_visitor(visitor: VisitorDep, csrf: Annotated[str, Form()] = "") -> Visitor:
    """The visitor of a form post whose hidden CSRF field matches their session's token."""
    if not same_secret(csrf, visitor.csrf):
        raise BeamError("BEM-704", "the form's security token is missing or out of date")
    return visitor


FormVisitorDep = Annotated[Visitor, Depends(get_form_visitor)]
