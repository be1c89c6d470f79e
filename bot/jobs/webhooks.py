"""POSTing JSON to an operator's webhook (the docs build after a publish, a scheduled run's
summaries), and showing its URL without the secret it may carry."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from pydantic import JsonValue


def post_json(url: str, payload: dict[str, JsonValue], *, timeout: float) -> httpx.Response | str:
    """POST ``payload`` as JSON, without following redirects: the response (whatever its
    status), or why ``url`` was not reached, with the URL shown as ``public_webhook_url``."""
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            return client.post(url, json=payload, headers={"User-Agent": "riverbeam"})
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
