"""A client for any OpenAI-compatible chat-completions endpoint, with retries and streaming.

Failures map onto the model codes in ``bot.core.errors``:

- BEM-060: the endpoint could not be reached on every attempt; or a stream broke after the
  model had started its reply (a new request would pay for it again).
- BEM-061: the endpoint refused the request with a status that another attempt cannot fix
  (400, 401, 403, 404, 422, ..., or any status with ``x-should-retry: false``). At once.
- BEM-062: the endpoint answered 408, 409, 429 or 5xx on every attempt.
- BEM-063: the reply is not a chat completion (not JSON, no choices, a tool call without a
  name, a broken event stream, ...). Raised at once: the same request gets the same reply.
- BEM-065: ``ALLOW_REMOTE_MODEL_REQUESTS`` is off and the endpoint is not on loopback.
- BEM-069: a non-streamed reply did not come within the read timeout; it is not requested
  again, since the model may have been generating it.

The API key never appears in an error message, a log line or ``repr``.

Replies are read in ``bot.clients.openai_replies``; the retry policy is ``bot.clients.retry``;
the settings a client is built from are ``bot.clients.profiles``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import random
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final

import httpx
from pydantic import SecretStr

from bot.clients import profiles
from bot.clients.base import Completion, Message, TextDelta
from bot.clients.openai_replies import (
    Progress,
    malformed_reply,
    parse_completion,
    provider_message,
    read_event_stream,
)
from bot.clients.retry import (
    RETRYABLE_TRANSPORT_ERRORS,
    RetryableFailure,
    backoff_delay,
    retry_after,
    should_retry,
)
from bot.clients.sse import SseError
from bot.config import ModelSettings, TokenParameter
from bot.core import jsonlimits
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec

ALLOW_REMOTE_MODEL_REQUESTS: bool = True
"""When False, requests to any host but loopback fail with BEM-065 before any network I/O.
Read at request time, so tests can turn it off for a whole run."""

_SNIPPET_CHARS = 200
# Shorter "keys" are placeholders for local servers; redacting them would garble messages.
_MIN_REDACTED_KEY = 8

_HINTS: Final[Mapping[int, str]] = {
    400: "the provider rejected the request body; its message says why",
    401: "check the API key (model.api_key_env, BEAM_API_KEY or OPENAI_API_KEY)",
    403: "the API key has no access to this model or endpoint",
    404: "check the base URL (it usually ends in /v1) and the model name",
    422: "the provider rejected the request body; its message says why",
}

_log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class OpenAiCompatible:
    """``POST {base_url}/chat/completions`` for any OpenAI-compatible endpoint. Immutable:
    ``with_max_tokens`` and ``with_extra_body`` return new clients.

    Only what is set is sent: sampling, seed, ``parallel_tool_calls``, ``reasoning_effort``
    and ``tool_choice`` are left out unless given, so the provider's defaults apply and a
    reasoning model is not sent a parameter it rejects. The output-token limit goes in
    ``token_parameter`` (``max_completion_tokens`` for OpenAI's newer models,
    ``max_tokens`` for most other servers).

    ``transport`` replaces the network (the caller keeps ownership and closes it), ``sleep``
    and ``rng`` replace the waiting and the jitter between attempts, for tests.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        max_tokens: int = profiles.DEFAULT_MAX_OUTPUT_TOKENS,
        context_window: int | None = None,
        token_parameter: TokenParameter = "max_tokens",
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        parallel_tool_calls: bool | None = None,
        reasoning_effort: str | None = None,
        tool_choice: str | None = None,
        connect_timeout: float = profiles.DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = profiles.DEFAULT_READ_TIMEOUT,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: profiles.Auth = "bearer",
        max_retries: int = profiles.DEFAULT_MAX_RETRIES,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        retry_after_cap: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._endpoint = _endpoint(base_url)
        self._base_url = base_url.strip().rstrip("/")
        self._api_key = SecretStr(api_key.strip())
        self._model = model.strip()
        self._options: dict[str, Any] = {
            "max_tokens": max_tokens,
            "context_window": context_window,
            "token_parameter": token_parameter,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "parallel_tool_calls": parallel_tool_calls,
            "reasoning_effort": reasoning_effort,
            "tool_choice": tool_choice,
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "extra_body": _json_copy(extra_body or {}),
            "headers": dict(headers or {}),
            "auth": auth,
            "max_retries": max_retries,
            "backoff_base": backoff_base,
            "backoff_cap": backoff_cap,
            "retry_after_cap": retry_after_cap,
            "transport": transport,
            "sleep": sleep,
            "rng": rng,
        }
        self._max_tokens = max_tokens
        self._context_window = context_window
        self._token_parameter = token_parameter
        self._extra_body: dict[str, Any] = self._options["extra_body"]
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._retry_after_cap = retry_after_cap
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._transport = transport
        self._sleep = sleep
        self._rng = rng
        self._where = _safe_url(self._endpoint)
        self._validate()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAiCompatible | None:
        """A client configured from the environment alone, or None when no API key is set.
        Blank values count as unset."""
        return cls.from_settings(ModelSettings(), environ)

    @classmethod
    def from_settings(
        cls, settings: ModelSettings, environ: Mapping[str, str] | None = None
    ) -> OpenAiCompatible | None:
        """A client for the ``[model]`` settings, the variables and the provider profile
        (see ``bot.clients.profiles``); None when no API key is found."""
        resolved = profiles.resolve(settings, os.environ if environ is None else environ)
        return None if resolved is None else cls.from_resolved(resolved)

    @classmethod
    def from_resolved(cls, resolved: profiles.ResolvedModel, **options: Any) -> OpenAiCompatible:
        headers = dict(resolved.headers)
        if resolved.organization:
            headers.setdefault("OpenAI-Organization", resolved.organization)
        if resolved.project:
            headers.setdefault("OpenAI-Project", resolved.project)
        base_url = resolved.base_url
        if resolved.api_version and "api-version=" not in base_url:
            joiner = "&" if "?" in base_url else "?"
            base_url = f"{base_url}{joiner}api-version={resolved.api_version}"
        settings: dict[str, Any] = {
            "max_tokens": resolved.max_output_tokens,
            "context_window": resolved.context_window,
            "token_parameter": resolved.output_tokens_parameter,
            "temperature": resolved.temperature,
            "top_p": resolved.top_p,
            "seed": resolved.seed,
            "parallel_tool_calls": resolved.parallel_tool_calls,
            "reasoning_effort": resolved.reasoning_effort,
            "tool_choice": resolved.tool_choice,
            "connect_timeout": resolved.connect_timeout,
            "read_timeout": resolved.read_timeout,
            "extra_body": resolved.extra_body,
            "headers": headers,
            "auth": resolved.auth,
            "max_retries": resolved.max_retries,
        }
        secret = resolved.api_key.get_secret_value()
        return cls(base_url, secret, resolved.model, **(settings | options))

    def with_max_tokens(self, max_tokens: int) -> OpenAiCompatible:
        return self._replace(max_tokens=max_tokens)

    def with_extra_body(self, extra_body: Mapping[str, Any]) -> OpenAiCompatible:
        """A client whose extra body is ``extra_body`` (replaced, not merged)."""
        return self._replace(extra_body=extra_body)

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def model(self) -> str:
        return self._model

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    @property
    def context_window(self) -> int | None:
        """The model's window in tokens when configured (the profile's or
        ``model.context_window``); what a ``ToolLoopAgent``'s default budget keeps to."""
        return self._context_window

    @property
    def endpoint(self) -> str:
        """The URL requests go to, without user info or query (either may hold a secret)."""
        return self._where

    @property
    def output_limit(self) -> str:
        """The output-token limit as the request carries it, for messages."""
        return f"{self._token_parameter}={self._max_tokens}"

    @property
    def extra_body(self) -> dict[str, Any]:
        return _json_copy(self._extra_body)

    def __repr__(self) -> str:
        base = _safe_url(httpx.URL(self._base_url))
        return f"OpenAiCompatible(base_url={base!r}, model={self._model!r}, api_key=<hidden>)"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self._refuse_remote_when_disabled()
        body = self._body(messages, tools, stream=False)
        failures = 0
        async with self._http() as http:
            while True:
                try:
                    response = await self._post(http, body)
                    break
                except RetryableFailure as failure:
                    if isinstance(failure.__cause__, httpx.ReadTimeout):
                        raise self._not_replayed(failure) from failure
                    failures += 1
                    await self._back_off(failure, failures)
        return self._parse_json_reply(response)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        """Yields a ``TextDelta`` per piece of answer text, then the whole ``Completion``.

        A stream that breaks before any text was yielded is retried like a failed request.
        Once text has reached the caller a retry would repeat it, so a break then is BEM-060.
        """
        self._refuse_remote_when_disabled()
        body = self._body(messages, tools, stream=True)
        failures = 0
        async with self._http() as http:
            while True:
                progress = Progress()
                try:
                    # aclosing: a caller that stops early closes the response now, not at GC.
                    stream = self._stream_once(http, body, progress)
                    async with contextlib.aclosing(stream) as items:
                        async for item in items:
                            yield item
                    return
                except RetryableFailure as failure:
                    if progress.started:
                        raise BeamError(
                            "BEM-060",
                            f"the model stream from {self._where} broke after the model had"
                            f" started its reply ({failure}); a stream cannot resume and a new"
                            " request would pay for the whole reply again, so it was not"
                            " repeated: run the turn again",
                        ) from failure
                    failures += 1
                    await self._back_off(failure, failures)

    # -- configuration ---------------------------------------------------------------

    def _validate(self) -> None:
        options = self._options
        sampling = [options["temperature"], options["top_p"]]
        problems = [
            ("model must not be empty", bool(self._model)),
            ("max_tokens must be at least 1", self._max_tokens >= 1),
            (
                "connect_timeout and read_timeout must be more than 0 seconds",
                min(options["connect_timeout"], options["read_timeout"]) > 0,
            ),
            ("max_retries must not be negative", self._max_retries >= 0),
            (
                "backoff_base, backoff_cap and retry_after_cap must not be negative",
                min(self._backoff_base, self._backoff_cap, self._retry_after_cap) >= 0,
            ),
            (
                "temperature and top_p must be finite",
                all(math.isfinite(value) for value in sampling if value is not None),
            ),
            (
                "reasoning_effort must be one of " + ", ".join(profiles.OPENAI_REASONING_EFFORTS),
                options["reasoning_effort"] in (None, *profiles.OPENAI_REASONING_EFFORTS),
            ),
        ]
        failed = [message for message, ok in problems if not ok]
        if failed:
            raise BeamError("BEM-900", f"model client configuration: {'; '.join(failed)}")

    def _replace(self, **changes: Any) -> OpenAiCompatible:
        secret = self._api_key.get_secret_value()
        return OpenAiCompatible(self._base_url, secret, self._model, **(self._options | changes))

    def _refuse_remote_when_disabled(self) -> None:
        if ALLOW_REMOTE_MODEL_REQUESTS or _is_loopback(self._endpoint.host):
            return
        raise BeamError(
            "BEM-065",
            f"requests to the non-loopback model endpoint {self._where} are disabled"
            " (bot.clients.openai_compatible.ALLOW_REMOTE_MODEL_REQUESTS is False);"
            " point the client at a local server such as the test stub",
        )

    # -- one request -----------------------------------------------------------------

    def _body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": list(messages),
            self._token_parameter: self._max_tokens,
        }
        for name in _OPTIONAL_PARAMETERS:
            if self._options[name] is not None:
                body[name] = self._options[name]
        if tools:
            body["tools"] = [spec.openai_format() for spec in tools]
        else:
            # Tool settings without tools are an error on the OpenAI API.
            body.pop("tool_choice", None)
            body.pop("parallel_tool_calls", None)
        body.update(self._extra_body)
        # The reply parser depends on these two, so the extra body does not get to set them.
        body["stream"] = stream
        body.pop("stream_options", None)
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _http(self) -> httpx.AsyncClient:
        # A new AsyncClient per call rather than one cached on the instance: a client's
        # connection pool belongs to the event loop that first used it, and Celery workers
        # run each job under its own asyncio.run, so a cached client would outlive its loop.
        # Reconnecting costs one TLS handshake per model turn, small next to the turn, and
        # leaves the instance with nothing to close.
        transport = None if self._transport is None else _Borrowed(self._transport)
        headers = dict(self._options["headers"])
        if secret := self._api_key.get_secret_value():
            if self._options["auth"] == "api-key":
                headers["api-key"] = secret
            else:
                headers["Authorization"] = f"Bearer {secret}"
        return httpx.AsyncClient(transport=transport, timeout=self._timeout, headers=headers)

    async def _post(self, http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        with self._translated_errors():
            response = await http.post(
                self._endpoint, json=body, headers={"Accept": "application/json"}
            )
        self._check_status(response)
        return response

    async def _stream_once(
        self, http: httpx.AsyncClient, body: dict[str, Any], progress: Progress
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        accept = {"Accept": "text/event-stream"}
        with self._translated_errors():
            async with http.stream("POST", self._endpoint, json=body, headers=accept) as reply:
                if not reply.is_success:
                    await reply.aread()
                    self._check_status(reply)
                media_type = _media_type(reply)
                if media_type == "application/json":
                    # Some OpenAI-compatible servers ignore "stream": true and answer whole.
                    for item in await self._whole_reply(reply):
                        yield item
                    return
                if media_type != "text/event-stream":
                    raise malformed_reply(
                        f"a streamed reply has content-type {media_type or 'none'!r}, not"
                        " text/event-stream; the base URL may not point at an OpenAI-compatible"
                        " API"
                    )
                events = read_event_stream(reply, self._model, self._quote, progress)
                async with contextlib.aclosing(events):
                    async for item in events:
                        yield item

    async def _whole_reply(self, reply: httpx.Response) -> list[TextDelta | Completion]:
        await reply.aread()
        completion = self._parse_json_reply(reply)
        return [TextDelta(text=completion.text), completion] if completion.text else [completion]

    @contextlib.contextmanager
    def _translated_errors(self) -> Iterator[None]:
        try:
            yield
        except RETRYABLE_TRANSPORT_ERRORS as exc:
            raise RetryableFailure("BEM-060", self._describe(exc)) from exc
        except httpx.TransportError as exc:
            raise BeamError(
                "BEM-060",
                f"cannot reach the model endpoint {self._where}: {self._describe(exc)};"
                " check the base URL and any proxy settings",
            ) from exc
        except httpx.DecodingError as exc:
            raise malformed_reply(
                f"the reply body cannot be decoded: {self._describe(exc)}"
            ) from exc
        except SseError as exc:
            line = f": {self._quote(exc.line, 80)!r}" if exc.line else ""
            raise malformed_reply(f"the event stream is broken: {exc.reason}{line}") from exc

    def _check_status(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        status = response.status_code
        detail = self._snippet(response.text)
        if should_retry(status, response.headers):
            wait = retry_after(response.headers)
            if wait is not None:
                wait = min(wait, self._retry_after_cap)
            raise RetryableFailure("BEM-062", f"status {status}", detail, wait)
        if _over_window(status, response):
            raise BeamError(
                "BEM-072",
                f"the model endpoint {self._where} refused the request as longer than the"
                f" model's context window: {detail}; set model.context_window to the model's"
                " real window so the context budget keeps every request under it",
            )
        hint = _HINTS.get(status, "another attempt will not help; check the request")
        raise BeamError(
            "BEM-061",
            f"the model endpoint {self._where} refused the request with HTTP {status}:"
            f" {detail}; {hint}",
        )

    def _parse_json_reply(self, response: httpx.Response) -> Completion:
        try:
            payload = jsonlimits.loads(response.content, what="the reply")
        except ValueError:
            media_type = _media_type(response) or "none"
            start = self._quote(response.text, 80)
            raise malformed_reply(
                f"the reply is not JSON (content-type {media_type!r}, starts {start!r}); the"
                " base URL may point at a web page or proxy, not an OpenAI-compatible API"
            ) from None
        return parse_completion(payload, self._model, self._quote)

    # -- retries -----------------------------------------------------------------------

    def _not_replayed(self, failure: RetryableFailure) -> BeamError:
        seconds = self._timeout.read
        return BeamError(
            "BEM-069",
            f"the model endpoint {self._where} sent no reply within the read timeout"
            f" ({seconds:g} s); it may have been generating a long reply, which a new request"
            " would pay for again, so it was not repeated. Raise model.read_timeout, or use"
            " streaming (the workers do)",
        )

    async def _back_off(self, failure: RetryableFailure, failures: int) -> None:
        """Wait before the next attempt, or raise the final error when none is left."""
        if failures > self._max_retries:
            raise failure.exhausted(self._where, attempts=failures) from failure
        delay = failure.retry_after
        if delay is None:
            delay = backoff_delay(
                failures, base=self._backoff_base, cap=self._backoff_cap, rng=self._rng
            )
        _log.warning(
            "model request to %s failed: %s; retry %d of %d in %.2f s",
            self._where,
            failure,
            failures,
            self._max_retries,
            delay,
        )
        await self._sleep(delay)

    # -- messages that never carry the key --------------------------------------------

    def _redact(self, text: str) -> str:
        secret = self._api_key.get_secret_value()
        return text.replace(secret, "[redacted]") if len(secret) >= _MIN_REDACTED_KEY else text

    def _describe(self, exc: Exception) -> str:
        detail = str(exc)
        name = type(exc).__name__
        return self._redact(f"{name}: {detail}" if detail else name)

    def _quote(self, text: str, limit: int = _SNIPPET_CHARS) -> str:
        """Provider text fit for a message: key removed first (so truncation cannot leave
        part of it), whitespace collapsed, cut to ``limit`` characters."""
        flat = " ".join(self._redact(text).split())
        return flat if len(flat) <= limit else flat[:limit] + "…"

    def _snippet(self, body: str) -> str:
        """The provider's own error message when it sent one, else the body."""
        return self._quote(provider_message(body) or body) or "(empty body)"


class _Borrowed(httpx.AsyncBaseTransport):
    """An injected transport belongs to the caller: closing a per-call client must not
    close it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Left to the owner."""


# -- small helpers -------------------------------------------------------------------------

# Sent only when set; the provider's own defaults apply otherwise.
_OPTIONAL_PARAMETERS: Final = (
    "temperature",
    "top_p",
    "seed",
    "parallel_tool_calls",
    "reasoning_effort",
    "tool_choice",
)


# How providers say a request is over the window: OpenAI's and Azure's error code, and the
# message vLLM, llama.cpp and most OpenAI-compatible servers send with a plain 400.
_OVER_WINDOW_CODES: Final = frozenset({"context_length_exceeded", "string_above_max_length"})
_OVER_WINDOW_WORDS: Final = (
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
)


def _over_window(status: int, response: httpx.Response) -> bool:
    if status not in (400, 413, 422):
        return False
    try:
        payload = jsonlimits.loads(response.content, what="the error body")
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("code") in _OVER_WINDOW_CODES:
        return True
    said = (provider_message(response.text) or "").lower()
    return any(words in said for words in _OVER_WINDOW_WORDS)


def _endpoint(base_url: str) -> httpx.URL:
    """``{base_url}/chat/completions``, whatever trailing slashes the base URL has; a query
    string (``?api-version=...``) is kept."""
    try:
        url = httpx.URL(base_url.strip())
    except httpx.InvalidURL as exc:
        raise BeamError("BEM-900", f"the model base URL is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        # Not echoed: a mistyped URL is the likeliest place for a pasted credential.
        raise BeamError(
            "BEM-900",
            "the model base URL must start with http:// or https:// and name a host,"
            " like https://integrate.api.nvidia.com/v1",
        )
    return url.copy_with(path=url.path.rstrip("/") + "/chat/completions", fragment=None)


def _safe_url(url: httpx.URL) -> str:
    """The URL without user info or query, either of which may hold a credential."""
    return f"{url.scheme}://{url.netloc.decode('ascii', errors='replace')}{url.path}"


def _is_loopback(host: str) -> bool:
    """Decided from the URL alone, without DNS: ``localhost`` or a loopback address."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _media_type(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower()


def _json_copy(body: Mapping[str, Any]) -> dict[str, Any]:
    """A private deep copy; refusing what JSON cannot carry here beats failing mid-request."""
    try:
        copied = json.loads(json.dumps(body, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise BeamError("BEM-900", f"the extra body is not a JSON object: {exc}") from None
    if not isinstance(copied, dict):
        raise BeamError("BEM-900", "the extra body is not a JSON object")
    return copied
