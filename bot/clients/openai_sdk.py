"""The official ``openai`` SDK, configured for one model call.

``open_sdk`` builds an ``AsyncOpenAI``, or an ``AsyncAzureOpenAI`` for Azure, whose
transport, timeouts, retries (``max_retries``; the SDK's rules for statuses,
``x-should-retry``, ``retry-after-ms`` and ``Retry-After``, its backoff and jitter),
authentication and URLs are the SDK's own. Two of its steps are replaced, each because the
SDK has no setting for it:

- the wait before another attempt goes through the caller's ``sleep`` (tests record it
  instead of waiting) and is logged at WARNING, as every model retry always was;
- a read timeout of a non-streamed request is not retried but raised as ``ReplyTimedOut``
  (BEM-069): the model may have been generating the reply, and another request would pay
  for it again. The SDK passes its own errors on without retrying them.

(The subclasses also keep the SDK's own ``User-Agent``, which it builds from the class name.)

Both override methods of the SDK's client classes; ``constraints.txt`` pins the SDK, and the
tests in ``tests/clients`` exercise each one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import openai
from openai._models import FinalRequestOptions
from pydantic import SecretStr

from bot.clients.openai_replies import provider_message
from bot.clients.tls import shared_tls_context

Sleep = Callable[[float], Awaitable[None]]
TokenProvider = Callable[[], "str | Awaitable[str]"]
"""Entra ID: returns a bearer token for Azure OpenAI, called before every request."""

_log = logging.getLogger("bot.clients.openai_compatible")


class ReplyTimedOut(openai.OpenAIError):
    """A non-streamed request saw no reply within the read timeout; not retried."""


@dataclass(frozen=True)
class Connection:
    """Where requests go and how, as the SDK is given it."""

    base_url: str
    """Without a query: the SDK joins paths onto it."""
    query: Mapping[str, str]
    api_key: SecretStr
    headers: Mapping[str, str]
    timeout: httpx.Timeout
    max_retries: int
    transport: httpx.AsyncBaseTransport | None
    sleep: Sleep
    where: str
    """The endpoint as messages and log lines show it."""
    quote: Callable[[str], str]
    """Provider text fit for a log line (the API key taken out)."""
    azure: Azure | None = None


@dataclass(frozen=True)
class Azure:
    """Azure OpenAI: the ``api-key`` header or an Entra ID token, and an ``api-version``."""

    api_version: str
    deployment: str
    resource_endpoint: bool
    """The base URL is a resource endpoint (``https://RESOURCE.openai.azure.com``) and the SDK
    adds ``/openai/deployments/{deployment}``; otherwise it is the whole base URL."""
    token_provider: TokenProvider | None = None


if TYPE_CHECKING:
    _Sdk = openai.AsyncOpenAI
else:
    _Sdk = object


class RiverbeamSdk(_Sdk):
    """The steps Riverbeam replaces in the SDK's clients (see the module docstring), and
    ``pause``, the SDK's wait for a retry the SDK does not make."""

    riverbeam_sleep: Sleep
    riverbeam_where: str
    riverbeam_quote: Callable[[str], str]
    sdk_class = "AsyncOpenAI"

    @property
    def user_agent(self) -> str:
        # The SDK names its own class here; the subclasses below keep its name on the wire.
        return f"{self.sdk_class}/Python {self._version}"

    async def _sleep_for_retry(
        self,
        *,
        retries_taken: int,
        max_retries: int,
        options: FinalRequestOptions,
        response: Any,
    ) -> None:
        headers = None if response is None else response.headers
        delay = self._calculate_retry_timeout(max_retries - retries_taken, options, headers)
        _log.warning(
            "model request to %s failed: %s; retry %d of %d in %.2f s",
            self.riverbeam_where,
            self._said(response),
            retries_taken + 1,
            max_retries,
            delay,
        )
        await self.riverbeam_sleep(delay)

    def _said(self, response: Any) -> str:
        if response is None:
            return "no response (the connection failed or timed out)"
        status = f"status {response.status_code}"
        try:
            text = response.text
        except httpx.ResponseNotRead:  # a streamed request's body, closed unread
            return status
        said = self.riverbeam_quote(provider_message(text) or text)
        return f"{status} ({said})" if said else status

    async def pause(self, failures: int, budget: int) -> None:
        """The SDK's wait after the ``failures``-th failed attempt of ``budget`` retries,
        for a failure the SDK did not see (a stream that broke before the reply began)."""
        options = FinalRequestOptions.construct(
            method="post", url="/chat/completions", max_retries=budget
        )
        await self._sleep_for_retry(
            retries_taken=failures - 1, max_retries=budget, options=options, response=None
        )

    async def _send_request(self, request: Any, *, stream: bool, **kwargs: Any) -> Any:
        try:
            response = await super()._send_request(request, stream=stream, **kwargs)
        except httpx.ReadTimeout as timeout:
            if stream:
                raise
            raise ReplyTimedOut(type(timeout).__name__) from timeout
        if stream and response.status_code >= 400:
            # The SDK closes a streamed error unread before it waits to retry, so the retry's
            # log line could not quote the provider (it reads the same body for its final
            # error anyway).
            await response.aread()
        return response


class _OpenAiSdk(RiverbeamSdk, openai.AsyncOpenAI):
    pass


class _AzureSdk(RiverbeamSdk, openai.AsyncAzureOpenAI):
    sdk_class = "AsyncAzureOpenAI"


def open_sdk(connection: Connection) -> RiverbeamSdk:
    """A new SDK client on a new HTTP client: close it (``async with``) when the call ends.

    A new one per call rather than one per ``OpenAiCompatible``: an HTTP client's connection
    pool belongs to the event loop that first used it, and Celery workers run each job
    under its own ``asyncio.run``.
    """
    transport = None if connection.transport is None else _Borrowed(connection.transport)
    secret = connection.api_key.get_secret_value()
    # Everything is passed explicitly, so the SDK's own fallbacks (OPENAI_ORG_ID,
    # OPENAI_PROJECT_ID, AZURE_OPENAI_*, OPENAI_API_VERSION) never add to the settings.
    headers: dict[str, Any] = {
        "OpenAI-Organization": openai.omit,
        "OpenAI-Project": openai.omit,
        **connection.headers,
    }
    common: dict[str, Any] = {
        "timeout": connection.timeout,
        "max_retries": connection.max_retries,
        "default_query": dict(connection.query),
        "default_headers": headers,
        "http_client": httpx.AsyncClient(
            transport=transport, timeout=connection.timeout, verify=shared_tls_context()
        ),
    }
    azure = connection.azure
    sdk: RiverbeamSdk
    if azure is None:
        sdk = _OpenAiSdk(base_url=connection.base_url, api_key=secret or "unused", **common)
    elif azure.resource_endpoint:
        sdk = _AzureSdk(
            azure_endpoint=connection.base_url,
            azure_deployment=azure.deployment,
            api_version=azure.api_version,
            **_azure_credential(secret, azure),
            **common,
        )
    else:
        sdk = _AzureSdk(
            base_url=connection.base_url,
            api_version=azure.api_version,
            **_azure_credential(secret, azure),
            **common,
        )
    sdk.riverbeam_sleep = connection.sleep
    sdk.riverbeam_where = connection.where
    sdk.riverbeam_quote = connection.quote
    return sdk


def request_headers(connection: Connection, *, accept: str) -> dict[str, Any]:
    """The headers of one request on top of the client's."""
    headers: dict[str, Any] = {"Accept": accept}
    if connection.azure is None and not connection.api_key.get_secret_value():
        # A local server that takes no key: no Authorization header at all (the SDK wants
        # that said on the request).
        headers["Authorization"] = openai.omit
    return headers


def _azure_credential(secret: str, azure: Azure) -> dict[str, Any]:
    if azure.token_provider is not None:
        return {"azure_ad_token_provider": azure.token_provider}
    return {"api_key": secret}


class _Borrowed(httpx.AsyncBaseTransport):
    """An injected transport belongs to the caller: closing a per-call client must not
    close it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Left to the owner."""
