"""Failures another attempt may fix, and reading a ``Retry-After`` header.

The SDK retries a model request until its response arrives (``bot.clients.openai_sdk``); a
streamed reply that breaks before the model began it is retried by ``OpenAiCompatible`` as a
``RetryableFailure``. When no attempt is left a failure becomes the final ``BeamError``
(BEM-060 unreachable, BEM-062 kept failing) through ``exhausted``. ``parse_retry_after``
serves the forge clients, which do their own HTTP.
"""

from __future__ import annotations

import email.utils
import math
import time
from datetime import UTC

import httpx

from bot.core.errors import BeamError

# While a streamed reply is read: the connection dropped or went silent. Before the model
# began its reply another attempt can succeed; model calls have no side effects beyond
# their cost, so repeating the POST is safe.
RETRYABLE_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class RetryableFailure(Exception):
    """A failed attempt that another attempt may fix; ``code`` is raised once none is left."""

    def __init__(self, code: str, summary: str, detail: str = "") -> None:
        super().__init__(summary)
        self.code = code
        self.summary = summary
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.summary} ({self.detail})" if self.detail else self.summary

    def exhausted(self, where: str, *, attempts: int) -> BeamError:
        detail = f" ({self.detail})" if self.detail else ""
        if self.code == "BEM-062":
            return BeamError(
                "BEM-062",
                f"the model endpoint {where} kept failing: last {self.summary} after"
                f" {attempts} attempts{detail}; the provider is overloaded or down, try again"
                " later",
            )
        return BeamError(
            "BEM-060",
            f"the model endpoint {where} is unreachable: {self.summary} after {attempts}"
            f" attempts{detail}; check the base URL and the network, or raise the timeout",
        )


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date), or
    None when it is missing or unreadable. A date in the past means no wait."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None
