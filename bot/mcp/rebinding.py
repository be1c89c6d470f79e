"""The DNS-rebinding guard of ``/mcp``: the ``Host`` a request names, and its ``Origin`` when
it sends one, must be among ``api.mcp_allowed_hosts`` (the loopback names by default) or be
the API's own configured ``api.host:api.port``.

A page that rebinds its own name to the API's address reaches it under that foreign name,
and a browser says which page sent a request in ``Origin``; the MCP specification asks
servers to refuse both. The check runs before the bearer token is looked at: it costs
nothing, and a refused request learns nothing about tokens nor counts as a failed one."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from bot.config import ApiSettings
from bot.core.errors import BeamError

# Listening on these accepts any name, so none of them is the name clients use.
_ANY_ADDRESS = {"0.0.0.0", "::", "[::]"}
# How much of a refused header the problem document repeats.
_SHOWN = 80


def allowed_hosts(api: ApiSettings) -> tuple[str, ...]:
    """The configured patterns, and the API's own ``api.host:api.port`` unless it listens on
    every address."""
    if api.host in _ANY_ADDRESS:
        return api.mcp_allowed_hosts
    own = f"[{api.host}]" if ":" in api.host and not api.host.startswith("[") else api.host
    return (*api.mcp_allowed_hosts, f"{own}:{api.port}")


def _split(authority: str) -> tuple[str, str | None] | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` as (lower-case name, port or
    None); None when it is none of them."""
    if authority.startswith("["):
        end = authority.find("]") + 1
        name, rest = authority[:end], authority[end:]
    else:
        name, colon, port = authority.partition(":")
        rest = colon + port
    if not name or name == "[" or (rest and not rest.startswith(":")):
        return None
    return name.lower().removesuffix("."), rest[1:] if rest else None


def host_allowed(authority: str, patterns: tuple[str, ...]) -> bool:
    """Whether a ``Host`` value matches a pattern: the same name (case aside), and the same
    port, or none on both sides, or a pattern port of ``*`` (any, or none); ``*`` alone
    matches any host."""
    found = _split(authority)
    if found is None or not (found[1] is None or found[1].isdigit()):
        return False
    for pattern in patterns:
        if pattern == "*":
            return True
        wanted = _split(pattern)
        if wanted is not None and wanted[0] == found[0] and wanted[1] in ("*", found[1]):
            return True
    return False


def origin_allowed(origin: str, patterns: tuple[str, ...]) -> bool:
    """Whether an ``Origin`` is ``http(s)://`` an allowed host, and nothing more (``null``,
    the origin of a sandboxed or local page, is not)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    bare = not (parts.path or parts.query or parts.fragment or "@" in parts.netloc)
    return parts.scheme in ("http", "https") and bare and host_allowed(parts.netloc, patterns)


class RebindingGuard:
    """Refuses a request to ``app`` under a foreign ``Host`` (421, BEM-740) or from a foreign
    ``Origin`` (403, BEM-741), raised to the API's problem handlers."""

    def __init__(self, api: ApiSettings, app: ASGIApp) -> None:
        self.patterns = allowed_hosts(api)
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not host_allowed(host, self.patterns):
            raise BeamError(
                "BEM-740",
                f"/mcp does not answer to the host {host[:_SHOWN]!r}; an operator adds the "
                "name clients use to api.mcp_allowed_hosts",
            )
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.patterns):
            raise BeamError(
                "BEM-741",
                f"/mcp does not answer pages of the origin {origin[:_SHOWN]!r}; an operator "
                "adds its host to api.mcp_allowed_hosts",
            )
        await self.app(scope, receive, send)
