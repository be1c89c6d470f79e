"""The retry policy for model requests: which failures another attempt may fix, and how long
to wait before it.

A ``RetryableFailure`` is raised inside one attempt; when no attempt is left it becomes the
final ``BeamError`` (BEM-060 unreachable, BEM-062 kept failing) through ``exhausted``.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable
from datetime import UTC
from typing import Final

import httpx

from bot.core.errors import BeamError

RETRY_STATUSES_BELOW_500: Final = frozenset({408, 409, 429})
"""Request timeout, a lock conflict and rate limiting; every 5xx is retried too."""

# The request may never have reached the model, or its reply was lost on the way back:
# another attempt can succeed. Model calls have no side effects beyond their cost, so
# repeating the POST is safe. Other transport errors (unsupported scheme, a proxy refusing
# us) would fail the same way again.
RETRYABLE_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

_MAX_BACKOFF_EXPONENT = 62  # 2**62 already exceeds any cap; keeps the float finite


class RetryableFailure(Exception):
    """A failed attempt that another attempt may fix; ``code`` is raised once none is left."""

    def __init__(
        self, code: str, summary: str, detail: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(summary)
        self.code = code
        self.summary = summary
        self.detail = detail
        self.retry_after = retry_after

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


def should_retry(status: int, headers: httpx.Headers) -> bool:
    """Whether another attempt may help, as the official SDK decides: the provider's own
    ``x-should-retry`` header first, then 408, 409, 429 and any 5xx."""
    hint = str(headers.get("x-should-retry", "")).strip().lower()
    if hint in ("true", "false"):
        return hint == "true"
    return status in RETRY_STATUSES_BELOW_500 or status >= 500


def retry_after(headers: httpx.Headers) -> float | None:
    """The provider's wait: ``retry-after-ms`` (milliseconds) first, then ``Retry-After``."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            wait = float(milliseconds.strip()) / 1000
        except ValueError:
            wait = math.nan
        if math.isfinite(wait):
            return max(0.0, wait)
    return parse_retry_after(headers.get("retry-after"))


def backoff_delay(failures: int, *, base: float, cap: float, rng: Callable[[], float]) -> float:
    """The capped exponential step, less up to a quarter of it at random, so clients that
    failed together do not retry together (the official SDK's jitter)."""
    exponent = min(failures - 1, _MAX_BACKOFF_EXPONENT)
    return min(cap, base * 2.0**exponent) * (1.0 - 0.25 * rng())


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
