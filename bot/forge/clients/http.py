"""One HTTP call to a forge's API under a total deadline, and the failures any forge shares.

httpx's timeouts are per operation: a server that sends one byte a second never trips a
read timeout, and a call could last forever. ``call`` runs the whole exchange (connecting,
sending, the headers and every byte of the body) under one deadline
(``bot.clients.deadline.within``, as the webhooks do), so it ends by its deadline whatever
the server does, and reads at most ``MAX_REPLY_BYTES``. The TLS context is the one every
outbound client shares (``bot.clients.tls``). ``read_secret`` reads a token or key
file for any client, naming the file, never its text, when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bot.clients.deadline import DeadlinePassed, within
from bot.clients.retry import parse_retry_after
from bot.clients.tls import shared_tls_context
from bot.core.errors import ForgeCredentialsError, ForgeRefused, ForgeRetryLater

DEFAULT_DEADLINE_SECONDS = 15.0
MAX_REPLY_BYTES = 8 * 1024 * 1024
"""A forge's replies that the clients read (a page of 100 files or comments) are far less."""


@dataclass(frozen=True)
class Reply:
    """What came back: the status, the headers and the whole body."""

    status: int
    headers: httpx.Headers
    body: bytes
    url: str


def call(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    params: Mapping[str, str | int] | None = None,
    json: Any = None,
    deadline: float = DEFAULT_DEADLINE_SECONDS,
    forge: str,
) -> Reply:
    """The reply to one request, or ``ForgeRetryLater`` (BEM-820) when the forge cannot be
    reached or the exchange runs past ``deadline`` seconds. ``forge`` names it in messages;
    nothing of ``headers`` (the credentials) ever is."""
    try:
        return within(deadline, lambda: _exchange(method, url, headers, params, json, deadline))
    except DeadlinePassed:
        raise ForgeRetryLater(
            "BEM-820", f"{forge} did not answer {method} {_shown(url)} within {deadline:g} s"
        ) from None
    except _TooLarge:
        raise ForgeRefused(
            "BEM-823", f"{forge} answered {method} {_shown(url)} with over {MAX_REPLY_BYTES} bytes"
        ) from None
    except (httpx.TransportError, OSError) as error:
        # httpx's message names the URL at most, never a header.
        raise ForgeRetryLater(
            "BEM-820",
            f"{forge} could not be reached for {method} {_shown(url)}: "
            f"{type(error).__name__}: {error}",
        ) from None


def answered(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    params: Mapping[str, str | int] | None,
    json: Any,
    deadline: float,
    forge: str,
    allow: tuple[int, ...],
    failure: Callable[[str, Reply], Exception],
) -> Reply:
    """``call``'s reply when it is a success or a status in ``allow``; else the forge's
    ``failure`` for it, given ``METHOD /path``."""
    reply = call(
        method, url, headers=headers, params=params, json=json, deadline=deadline, forge=forge
    )
    if 200 <= reply.status < 300 or reply.status in allow:
        return reply
    raise failure(f"{method} {httpx.URL(url).path}", reply)


class _TooLarge(Exception):
    pass


async def _exchange(
    method: str,
    url: str,
    headers: Mapping[str, str],
    params: Mapping[str, str | int] | None,
    json: Any,
    deadline: float,
) -> Reply:
    # httpx's own timeout only keeps one stalled read from outliving the deadline.
    async with httpx.AsyncClient(
        verify=shared_tls_context(), timeout=deadline, follow_redirects=False, trust_env=False
    ) as client:
        request = client.build_request(method, url, headers=headers, params=params, json=json)
        response = await client.send(request, stream=True)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_REPLY_BYTES:
                    raise _TooLarge
        finally:
            await response.aclose()
        return Reply(response.status_code, response.headers, bytes(body), str(request.url))


def _shown(url: str) -> str:
    return str(httpx.URL(url).copy_with(query=None))


def message_of(reply: Reply) -> str:
    """The forge's own message in an error reply (GitHub ``message``, GitLab ``message`` or
    ``error``), shortened; the status alone when there is none."""
    text = ""
    try:
        document = httpx.Response(200, content=reply.body).json()
    except ValueError:
        document = None
    if isinstance(document, dict):
        found = document.get("message") or document.get("error")
        text = found if isinstance(found, str) else ""
    return text[:300]


def generic_failure(forge: str, what: str, reply: Reply) -> ForgeRetryLater | ForgeRefused:
    """The error of a reply that is not a success, as any forge means it: a 5xx or a 408 is
    retried (after ``Retry-After`` when sent, BEM-821), a 429 too (BEM-822), any other 4xx
    is refused (BEM-823)."""
    said = message_of(reply)
    shown = f"{forge} answered {what} with {reply.status}" + (f": {said}" if said else "")
    wait = parse_retry_after(reply.headers.get("retry-after"))
    if reply.status >= 500 or reply.status == 408:
        return ForgeRetryLater("BEM-821", shown, retry_after_seconds=wait)
    if reply.status == 429:
        return ForgeRetryLater("BEM-822", shown, retry_after_seconds=wait)
    return ForgeRefused("BEM-823", shown)


def read_secret(path: Path, field: str) -> str:
    """A token or key from its file, stripped; BEM-824 naming the file, never its text."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ForgeCredentialsError("BEM-824", f"cannot read {field} {path}: {reason}") from None
    if not text:
        raise ForgeCredentialsError("BEM-824", f"{field} {path} is empty")
    return text


def reply_object(reply: Reply, forge: str, code: str) -> dict[str, Any]:
    """A success's JSON object; ``code`` (the forge's "not its API") when it is none."""
    document = _document(reply, forge, code)
    if not isinstance(document, dict):
        raise malformed(reply, forge, code, "a body that is not an object")
    return document


def reply_list(reply: Reply, forge: str, code: str) -> list[Any]:
    """A success's JSON list (a page of a listing); ``code`` when it is none."""
    document = _document(reply, forge, code)
    if not isinstance(document, list):
        raise malformed(reply, forge, code, "a body that is not a list")
    return document


def malformed(reply: Reply, forge: str, code: str, what: str) -> ForgeRefused:
    path = httpx.URL(reply.url).path
    return ForgeRefused(code, f"{forge}'s {reply.status} reply to {path} has {what}")


def next_link(reply: Reply, base_url: str, forge: str, code: str) -> str | None:
    """The ``Link`` header's ``next`` page; ``code`` when it is on another host than
    ``base_url``'s, since the credentials go with each request."""
    found = httpx.Response(200, headers=reply.headers).links.get("next", {}).get("url")
    if found is None:
        return None
    following = httpx.URL(found)
    origin = httpx.URL(base_url).copy_with(path="/", query=None)
    if following.copy_with(path="/", query=None) != origin:
        raise ForgeRefused(code, f"{forge}'s next page {found} is on another host")
    return str(following)


def number(text: str | None) -> float | None:
    """A header's number (a rate limit's reset), None when absent or not one."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _document(reply: Reply, forge: str, code: str) -> Any:
    try:
        return httpx.Response(200, content=reply.body).json()
    except ValueError:
        raise malformed(reply, forge, code, "a body that is not JSON") from None
