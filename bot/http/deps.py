"""FastAPI dependencies: the shared ``JobService`` and the ``Principal`` behind a bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from bot.core.errors import BeamError
from bot.http.limits import AuthThrottle, client_address
from bot.service.access import Principal
from bot.service.jobs import JobService

# auto_error off: a missing token is our BEM-700 problem document, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="a Riverbeam API token (rb_...)")


def get_service(request: Request) -> JobService:
    service: JobService = request.app.state.service
    return service


def get_principal(
    request: Request,
    service: Annotated[JobService, Depends(get_service)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise BeamError("BEM-700", "send the header 'Authorization: Bearer <token>'")
    return authenticated(request, service, credentials.credentials)


def authenticated(request: Request, service: JobService, token: str) -> Principal:
    """The holder of ``token``, checked under the client's failure allowance: a client that
    sent too many wrong tokens is refused (BEM-712) before this one is looked at."""
    throttle: AuthThrottle = request.app.state.auth_throttle
    client = client_address(request)
    throttle.check(client)
    try:
        return service.tokens.authenticate(token)
    except BeamError:
        throttle.failed(client)
        raise


ServiceDep = Annotated[JobService, Depends(get_service)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
