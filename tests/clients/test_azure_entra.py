"""Azure OpenAI with an Entra ID token instead of a key: the SDK's ``azure_ad_token_provider``,
from Python and from ``model.azure_ad_token_provider`` (a factory, loaded like every other
``module:function`` setting)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from bot.clients import OpenAiCompatible
from bot.clients.profiles import resolve
from bot.config import ModelSettings
from bot.core.errors import ConfigError
from harness.stub_model import StubModel, completion, text_stream
from tests.clients.helpers import MESSAGES, collect

ISSUED: list[str] = []


def entra_token_provider() -> Callable[[], Awaitable[str]]:
    """The factory ``model.azure_ad_token_provider`` names in these tests: a provider that
    hands out a new token on each call, as a credential refreshing its token would."""

    async def token() -> str:
        ISSUED.append(f"entra-token-{len(ISSUED) + 1}")
        return ISSUED[-1]

    return token


def not_a_provider() -> str:
    return "a token, not a provider"


@pytest.fixture(autouse=True)
def fresh_tokens() -> None:
    ISSUED.clear()


async def test_a_token_provider_is_asked_before_every_request(stub_model: StubModel) -> None:
    client = OpenAiCompatible(
        stub_model.origin,
        "",
        "dep",
        azure_ad_token_provider=entra_token_provider(),
        api_version="2024-10-21",
    )
    stub_model.enqueue(completion("one"), text_stream("two"))

    assert (await client.complete(MESSAGES, [])).text == "one"
    assert (await collect(client.stream(MESSAGES, [])))[-1].text == "two"  # type: ignore[union-attr]

    first, second = stub_model.requests
    assert [first.headers["authorization"], second.headers["authorization"]] == [
        "Bearer entra-token-1",
        "Bearer entra-token-2",
    ]
    assert "api-key" not in first.headers
    assert first.path == "/openai/deployments/dep/chat/completions?api-version=2024-10-21"


async def test_the_setting_names_a_factory_and_stands_for_the_key(stub_model: StubModel) -> None:
    settings = ModelSettings(
        provider="azure-openai",
        base_url=f"{stub_model.origin}/openai/deployments/dep",
        model="dep",
        azure_ad_token_provider="tests.clients.test_azure_entra:entra_token_provider",
    )

    resolved = resolve(settings, {})
    client = OpenAiCompatible.from_settings(settings, {})
    assert resolved is not None and client is not None
    stub_model.enqueue(completion("ok"))
    await client.complete(MESSAGES, [])

    assert resolved.sources["api_key"] == "none: an Entra ID token instead"
    assert stub_model.requests[0].headers["authorization"] == "Bearer entra-token-1"


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (
            ModelSettings(
                provider="openai",
                model="gpt-x",
                azure_ad_token_provider="tests.clients.test_azure_entra:entra_token_provider",
            ),
            "is for azure-openai, not openai",
        ),
        (
            ModelSettings(
                provider="azure-openai",
                base_url="https://team.openai.azure.com",
                model="dep",
                azure_ad_token_provider="tests.clients.test_azure_entra:not_a_provider",
            ),
            "returned no callable token provider",
        ),
        (
            ModelSettings(
                provider="azure-openai",
                base_url="https://team.openai.azure.com",
                model="dep",
                azure_ad_token_provider="tests.clients.test_azure_entra:missing",
            ),
            "has no function missing",
        ),
    ],
)
def test_a_bad_token_provider_setting_is_bem_900(settings: ModelSettings, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        OpenAiCompatible.from_settings(settings, {"OPENAI_API_KEY": "sk-unused-key"})

    assert caught.value.code == "BEM-900"


def test_azure_without_a_key_or_a_token_provider_is_bem_900() -> None:
    with pytest.raises(ConfigError, match="needs an API key or an azure_ad_token_provider"):
        OpenAiCompatible("https://team.openai.azure.com", "", "dep", auth="api-key")
