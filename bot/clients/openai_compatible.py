"""A client for any OpenAI-compatible chat-completions endpoint, built on the official
``openai`` SDK (``bot.clients.openai_sdk``): its transport, timeouts, retries, Azure URLs and
authentication. Riverbeam reads the replies itself (``bot.clients.openai_replies``, over the
SDK's raw responses) so that their size and nesting stay bounded and every malformed one is
named; docs/models.md says what stays hand-written and why.

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
- BEM-072: the endpoint refused the request as longer than the model's context window.

The API key never appears in an error message, a log line or ``repr``.

The SDK's errors are mapped in ``bot.clients.openai_errors``; the settings a client is built
from are ``bot.clients.profiles``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import os
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from typing import Any, Final

import httpx
import openai
from pydantic import SecretStr

from bot.clients import openai_errors, profiles
from bot.clients.base import Completion, Message, TextDelta
from bot.clients.openai_replies import (
    Progress,
    malformed_reply,
    parse_completion,
    read_event_stream,
)
from bot.clients.openai_sdk import (
    Azure,
    Connection,
    RiverbeamSdk,
    Sleep,
    TokenProvider,
    open_sdk,
    request_headers,
)
from bot.clients.retry import RETRYABLE_TRANSPORT_ERRORS, RetryableFailure
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


class OpenAiCompatible:
    """``POST {base_url}/chat/completions`` for any OpenAI-compatible endpoint, through the
    official SDK's ``AsyncOpenAI`` (``AsyncAzureOpenAI`` with ``auth="api-key"`` or an
    Entra ID ``azure_ad_token_provider``). Immutable: ``with_max_tokens`` and
    ``with_extra_body`` return new clients.

    Only what is set is sent: sampling, seed, ``parallel_tool_calls``, ``reasoning_effort``
    and ``tool_choice`` are left out unless given, so the provider's defaults apply and a
    reasoning model is not sent a parameter it rejects. The output-token limit goes in
    ``token_parameter`` (``max_completion_tokens`` for OpenAI's newer models,
    ``max_tokens`` for most other servers).

    ``transport`` replaces the network (the caller keeps ownership and closes it) and
    ``sleep`` the waiting between attempts, for tests.
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
        api_version: str | None = None,
        azure_ad_token_provider: TokenProvider | None = None,
        max_retries: int = profiles.DEFAULT_MAX_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
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
            "api_version": api_version,
            "azure_ad_token_provider": azure_ad_token_provider,
            "max_retries": max_retries,
            "transport": transport,
            "sleep": sleep,
        }
        self._max_tokens = max_tokens
        self._context_window = context_window
        self._token_parameter = token_parameter
        self._extra_body: dict[str, Any] = self._options["extra_body"]
        self._max_retries = max_retries
        self._read_timeout = read_timeout
        self._validate()
        self._connection, self._endpoint = self._connect()

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
            "api_version": resolved.api_version,
            "azure_ad_token_provider": profiles.token_provider(resolved),
            "max_retries": resolved.max_retries,
        }
        secret = resolved.api_key.get_secret_value()
        return cls(resolved.base_url, secret, resolved.model, **(settings | options))

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
        return _safe_url(self._endpoint)

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
        async with open_sdk(self._connection) as sdk:
            try:
                reply = await sdk.chat.completions.with_raw_response.create(
                    **_create_arguments(
                        body, request_headers(self._connection, accept="application/json")
                    )
                )
            except openai.OpenAIError as error:
                # Not chained: the SDK's message quotes the provider's body unredacted.
                raise self._final(error) from None
            return self._parse_json_reply(reply.content, reply.headers.get("content-type"))

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        """Yields a ``TextDelta`` per piece of answer text, then the whole ``Completion``.

        The SDK retries the request until its response arrives. A stream that breaks after
        that, before the model began its reply, is retried here within the same
        ``max_retries`` (the SDK cannot: its retries end with the response). Once the model
        has begun, a retry would pay for the reply again, so a break then is BEM-060.
        """
        self._refuse_remote_when_disabled()
        body = self._body(messages, tools, stream=True)
        failures = 0
        async with open_sdk(self._connection) as sdk:
            while True:
                progress = Progress()
                sdk.max_retries = self._max_retries - failures
                try:
                    # aclosing: a caller that stops early closes the response now, not at GC.
                    async with contextlib.aclosing(self._stream_once(sdk, body, progress)) as items:
                        async for item in items:
                            yield item
                    return
                except openai.OpenAIError as error:
                    raise self._final(error, earlier=failures) from None
                except RetryableFailure as failure:
                    if progress.started:
                        raise BeamError(
                            "BEM-060",
                            f"the model stream from {self.endpoint} broke after the model had"
                            f" started its reply ({failure}); a stream cannot resume and a new"
                            " request would pay for the whole reply again, so it was not"
                            " repeated: run the turn again",
                        ) from failure
                    failures += 1
                    if failures > self._max_retries:
                        raise failure.exhausted(self.endpoint, attempts=failures) from failure
                    await sdk.pause(failures, self._max_retries)

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
                "temperature and top_p must be finite",
                all(math.isfinite(value) for value in sampling if value is not None),
            ),
            (
                "reasoning_effort must be one of " + ", ".join(profiles.OPENAI_REASONING_EFFORTS),
                options["reasoning_effort"] in (None, *profiles.OPENAI_REASONING_EFFORTS),
            ),
            (
                "Azure OpenAI needs an API key or an azure_ad_token_provider",
                not self._azure
                or bool(self._api_key.get_secret_value())
                or options["azure_ad_token_provider"] is not None,
            ),
        ]
        failed = [message for message, ok in problems if not ok]
        if failed:
            raise BeamError("BEM-900", f"model client configuration: {'; '.join(failed)}")

    @property
    def _azure(self) -> bool:
        return self._options["auth"] == "api-key" or bool(self._options["azure_ad_token_provider"])

    def _connect(self) -> tuple[Connection, httpx.URL]:
        """What the SDK is given, and the endpoint its requests go to."""
        url = _base(self._base_url)
        query = dict(url.params)
        options = self._options
        azure = None
        if self._azure:
            # One on the base URL wins, as it always has.
            version = query.pop("api-version", None) or options["api_version"]
            azure = Azure(
                api_version=version or profiles.PROFILES["azure-openai"].api_version or "",
                deployment=self._model,
                resource_endpoint=url.path in ("", "/"),
                token_provider=options["azure_ad_token_provider"],
            )
        elif options["api_version"]:
            query.setdefault("api-version", options["api_version"])
        base = url.copy_with(query=None, path=url.path.rstrip("/"))
        endpoint = _endpoint(base, azure)
        connection = Connection(
            base_url=str(base),
            query=query,
            api_key=self._api_key,
            headers=options["headers"],
            timeout=httpx.Timeout(options["read_timeout"], connect=options["connect_timeout"]),
            max_retries=self._max_retries,
            transport=options["transport"],
            sleep=options["sleep"],
            where=_safe_url(endpoint),
            quote=self._quote,
            azure=azure,
        )
        return connection, endpoint

    def _replace(self, **changes: Any) -> OpenAiCompatible:
        secret = self._api_key.get_secret_value()
        return OpenAiCompatible(self._base_url, secret, self._model, **(self._options | changes))

    def _refuse_remote_when_disabled(self) -> None:
        if ALLOW_REMOTE_MODEL_REQUESTS or _is_loopback(self._endpoint.host):
            return
        raise BeamError(
            "BEM-065",
            f"requests to the non-loopback model endpoint {self.endpoint} are disabled"
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

    async def _stream_once(
        self, sdk: RiverbeamSdk, body: dict[str, Any], progress: Progress
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        create = sdk.chat.completions.with_streaming_response.create
        headers = request_headers(self._connection, accept="text/event-stream")
        async with create(**_create_arguments(body, headers)) as reply:
            media_type = _media_type(reply.headers.get("content-type"))
            with self._translated_errors():
                if media_type == "application/json":
                    # Some OpenAI-compatible servers ignore "stream": true and answer whole.
                    completion = self._parse_json_reply(await reply.read(), media_type)
                    if completion.text:
                        yield TextDelta(text=completion.text)
                    yield completion
                    return
                if media_type != "text/event-stream":
                    raise malformed_reply(
                        f"a streamed reply has content-type {media_type or 'none'!r}, not"
                        " text/event-stream; the base URL may not point at an OpenAI-compatible"
                        " API"
                    )
                events = read_event_stream(reply.iter_bytes(), self._model, self._quote, progress)
                async with contextlib.aclosing(events):
                    async for item in events:
                        yield item

    @contextlib.contextmanager
    def _translated_errors(self) -> Iterator[None]:
        """Failures while the SDK's raw response body is read, which the SDK leaves as they
        are."""
        try:
            yield
        except RETRYABLE_TRANSPORT_ERRORS as exc:
            raise RetryableFailure("BEM-060", openai_errors.describe(exc, self._quote)) from exc
        except httpx.TransportError as exc:
            raise BeamError(
                "BEM-060",
                f"the model stream from {self.endpoint} failed:"
                f" {openai_errors.describe(exc, self._quote)}",
            ) from exc
        except httpx.DecodingError as exc:
            raise malformed_reply(
                f"the reply body cannot be decoded: {openai_errors.describe(exc, self._quote)}"
            ) from exc
        except SseError as exc:
            line = f": {self._quote(exc.line, 80)!r}" if exc.line else ""
            raise malformed_reply(f"the event stream is broken: {exc.reason}{line}") from exc

    def _final(self, error: openai.OpenAIError, *, earlier: int = 0) -> BeamError:
        return openai_errors.from_sdk(
            error,
            where=self.endpoint,
            quote=self._quote,
            read_timeout=self._read_timeout,
            earlier=earlier,
        )

    def _parse_json_reply(self, content: bytes, content_type: str | None) -> Completion:
        try:
            payload = jsonlimits.loads(content, what="the reply")
        except ValueError:
            media_type = _media_type(content_type) or "none"
            start = self._quote(content.decode("utf-8", errors="replace"), 80)
            raise malformed_reply(
                f"the reply is not JSON (content-type {media_type!r}, starts {start!r}); the"
                " base URL may point at a web page or proxy, not an OpenAI-compatible API"
            ) from None
        return parse_completion(payload, self._model, self._quote)

    # -- messages that never carry the key --------------------------------------------

    def _redact(self, text: str) -> str:
        secret = self._api_key.get_secret_value()
        return text.replace(secret, "[redacted]") if len(secret) >= _MIN_REDACTED_KEY else text

    def _quote(self, text: str, limit: int = _SNIPPET_CHARS) -> str:
        """Provider text fit for a message: key removed first (so truncation cannot leave
        part of it), whitespace collapsed, cut to ``limit`` characters."""
        flat = " ".join(self._redact(text).split())
        return flat if len(flat) <= limit else flat[:limit] + "…"


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


def _create_arguments(body: dict[str, Any], headers: dict[str, Any]) -> dict[str, Any]:
    """``chat.completions.create`` arguments that send exactly ``body``: the SDK's typed
    parameters for what it requires, everything else as its ``extra_body``."""
    typed = ("model", "messages", "stream")
    return {
        **{name: body[name] for name in typed},
        "extra_body": {name: value for name, value in body.items() if name not in typed},
        "extra_headers": headers,
    }


def _base(base_url: str) -> httpx.URL:
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
    return url.copy_with(fragment=None)


def _endpoint(base: httpx.URL, azure: Azure | None) -> httpx.URL:
    """Where the SDK sends a chat completion: ``{base_url}/chat/completions``; on Azure with
    ``/openai/deployments/{deployment}`` added to a resource endpoint, or
    ``/deployments/{deployment}`` to a base URL without one (the SDK's rules)."""
    path = base.path.rstrip("/")
    if azure is not None and azure.resource_endpoint:
        path = f"/openai/deployments/{azure.deployment}"
    elif azure is not None and "/deployments" not in path:
        path = f"{path}/deployments/{azure.deployment}"
    return base.copy_with(path=path + "/chat/completions")


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


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def _json_copy(body: Mapping[str, Any]) -> dict[str, Any]:
    """A private deep copy; refusing what JSON cannot carry here beats failing mid-request."""
    try:
        copied = json.loads(json.dumps(body, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise BeamError("BEM-900", f"the extra body is not a JSON object: {exc}") from None
    if not isinstance(copied, dict):
        raise BeamError("BEM-900", "the extra body is not a JSON object")
    return copied
