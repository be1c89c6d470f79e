"""POSTing JSON to an operator's webhook (the docs build after a publish, a parked push, a
scheduled run's summaries), and showing its URL without the secret it may carry.

``timeout`` is a deadline for the whole exchange, not for each read (``bot.clients.deadline``):
a receiver that drips its answer is cut off when it passes. Only the status line and the
headers are waited for; the body is never read, so a receiver cannot hold the call with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from pydantic import JsonValue

from bot.clients.deadline import DeadlinePassed, within


@dataclass(frozen=True)
class WebhookAnswer:
    """What the receiver answered: its status."""

    status_code: int
    reason_phrase: str

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300


def post_json(
    url: str,
    payload: dict[str, JsonValue],
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
) -> WebhookAnswer | str:
    """POST ``payload`` as JSON, without following redirects, all of it within ``timeout``
    seconds: the answer (whatever its status), or why ``url`` was not reached, with the URL
    shown as ``public_webhook_url``."""
    sent = {"User-Agent": "riverbeam", **(headers or {})}

    async def post() -> WebhookAnswer:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client,
            client.stream("POST", url, json=payload, headers=sent) as response,
        ):
            return WebhookAnswer(response.status_code, response.reason_phrase)

    try:
        return within(timeout, post)
    except DeadlinePassed as error:
        return f"{error}"
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return str(error).replace(url, public_webhook_url(url)) or type(error).__name__


def public_webhook_url(url: str) -> str:
    """``url`` without userinfo, query or fragment: a webhook secret often rides in them."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid webhook URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}"
