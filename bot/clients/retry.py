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

from bot.errors import BeamError

RETRYABLE_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})

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


def backoff_delay(failures: int, *, base: float, cap: float, rng: Callable[[], float]) -> float:
    """Full jitter: anywhere between 0 and the capped exponential step, so clients that
    failed together do not retry together."""
    exponent = min(failures - 1, _MAX_BACKOFF_EXPONENT)
    return rng() * min(cap, base * 2.0**exponent)


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
