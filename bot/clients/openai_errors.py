"""What the SDK raised, once its retries were spent, as Riverbeam's model codes.

- ``APIStatusError``: BEM-062 when another attempt could have helped (``x-should-retry:
  true``, or 408, 409, 429, 5xx without ``x-should-retry: false``), with the attempts made;
  BEM-072 when the provider says the request is over the model's window; BEM-061 otherwise.
- ``APIConnectionError`` (and its ``APITimeoutError``): BEM-060, with the attempts made.
- ``ReplyTimedOut``: BEM-069, a non-streamed reply slower than the read timeout.

The attempts are read from the SDK's ``x-stainless-retry-count`` request header. Provider
text goes through ``quote``, which takes the API key out first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import openai

from bot.clients.openai_replies import Quote, provider_message
from bot.clients.openai_sdk import ReplyTimedOut
from bot.clients.retry import RetryableFailure
from bot.core import jsonlimits
from bot.core.errors import BeamError

_HINTS: Final[Mapping[int, str]] = {
    400: "the provider rejected the request body; its message says why",
    401: "check the API key (model.api_key_env, BEAM_API_KEY or OPENAI_API_KEY)",
    403: "the API key has no access to this model or endpoint",
    404: "check the base URL (it usually ends in /v1) and the model name",
    422: "the provider rejected the request body; its message says why",
}

_KEPT_FAILING_BELOW_500: Final = frozenset({408, 409, 429})

# How providers say a request is over the window: OpenAI's and Azure's error code, and the
# message vLLM, llama.cpp and most OpenAI-compatible servers send with a plain 400.
_OVER_WINDOW_CODES: Final = frozenset({"context_length_exceeded", "string_above_max_length"})
_OVER_WINDOW_WORDS: Final = (
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
)


def from_sdk(
    error: openai.OpenAIError, *, where: str, quote: Quote, read_timeout: float, earlier: int = 0
) -> BeamError:
    """The final error; ``earlier`` counts attempts made before the request that failed
    (streams that broke before the reply began)."""
    if isinstance(error, ReplyTimedOut):
        return BeamError(
            "BEM-069",
            f"the model endpoint {where} sent no reply within the read timeout"
            f" ({read_timeout:g} s); it may have been generating a long reply, which a new"
            " request would pay for again, so it was not repeated. Raise model.read_timeout,"
            " or use streaming (the workers do)",
        )
    if isinstance(error, openai.APIStatusError):
        return _refused(error, where, quote, earlier)
    if isinstance(error, openai.APIConnectionError):
        failure = RetryableFailure("BEM-060", describe(error.__cause__ or error, quote))
        return failure.exhausted(where, attempts=earlier + _attempts(error.request))
    return BeamError("BEM-060", f"the model request to {where} failed: {describe(error, quote)}")


def describe(error: BaseException, quote: Quote) -> str:
    detail = str(error)
    name = type(error).__name__
    return quote(f"{name}: {detail}" if detail else name, 300)


def _refused(error: openai.APIStatusError, where: str, quote: Quote, earlier: int) -> BeamError:
    response = error.response
    status = response.status_code
    detail = quote(provider_message(response.text) or response.text) or "(empty body)"
    if _kept_failing(status, response.headers.get("x-should-retry")):
        failure = RetryableFailure("BEM-062", f"status {status}", detail)
        return failure.exhausted(where, attempts=earlier + _attempts(response.request))
    if _over_window(status, response.content, response.text):
        return BeamError(
            "BEM-072",
            f"the model endpoint {where} refused the request as longer than the model's"
            f" context window: {detail}; set model.context_window to the model's real window"
            " so the context budget keeps every request under it",
        )
    hint = _HINTS.get(status, "another attempt will not help; check the request")
    return BeamError(
        "BEM-061",
        f"the model endpoint {where} refused the request with HTTP {status}: {detail}; {hint}",
    )


def _kept_failing(status: int, should_retry: str | None) -> bool:
    """Whether the SDK retries this status (so a final one means every attempt failed)."""
    if should_retry in ("true", "false"):
        return should_retry == "true"
    return status in _KEPT_FAILING_BELOW_500 or status >= 500


def _attempts(request: Any) -> int:
    """The attempts the SDK made: the retry count it sent with the last one, plus one."""
    try:
        return int(request.headers.get("x-stainless-retry-count", "0")) + 1
    except ValueError:
        return 1


def _over_window(status: int, content: bytes, text: str) -> bool:
    if status not in (400, 413, 422):
        return False
    try:
        payload = jsonlimits.loads(content, what="the error body")
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("code") in _OVER_WINDOW_CODES:
        return True
    said = (provider_message(text) or "").lower()
    return any(words in said for words in _OVER_WINDOW_WORDS)
