"""Model settings: ``[model]`` in riverbeam.toml, ``RIVERBEAM_MODEL__*`` overrides, the
``BEAM_*`` then ``OPENAI_*`` fallbacks, and what each provider profile puts on the wire
(read from the requests the loopback provider received)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from bot.clients import OpenAiCompatible
from bot.clients.profiles import OPENAI_REASONING_EFFORTS, is_reasoning_model, resolve
from bot.config import ModelSettings, load_settings
from bot.core.errors import ConfigError
from harness.stub_model import StubModel, completion
from tests.clients.helpers import KEY, MESSAGES, READ_FILE

SAMPLING = {"temperature", "top_p", "seed", "tool_choice", "parallel_tool_calls"}


async def sent(stub: StubModel, settings: ModelSettings, environ: dict[str, str]) -> Any:
    client = OpenAiCompatible.from_settings(settings, environ)
    assert client is not None
    stub.enqueue(completion("ok"))
    await client.complete(MESSAGES, [READ_FILE])
    return stub.requests[-1]


async def test_openai_sends_a_strict_openai_body_with_org_and_project(
    stub_model: StubModel,
) -> None:
    settings = ModelSettings(provider="openai", base_url=stub_model.base_url, model="gpt-x")
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_ORG_ID": "org-1", "OPENAI_PROJECT_ID": "proj-1"}

    request = await sent(stub_model, settings, environ)

    body = request.json
    assert body["max_completion_tokens"] == 4096 and "max_tokens" not in body
    assert set(body) == {"model", "messages", "max_completion_tokens", "tools", "stream"}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert (request.headers["openai-organization"], request.headers["openai-project"]) == (
        "org-1",
        "proj-1",
    )


@pytest.mark.parametrize(
    "suffix",
    ["", "/", "/openai/deployments/dep"],
    ids=["resource-endpoint", "resource-endpoint-slash", "deployment-url"],
)
async def test_azure_authenticates_with_api_key_and_api_version(
    stub_model: StubModel, suffix: str
) -> None:
    # Both of Azure's URL forms: the resource endpoint, with the deployment (the model
    # name) added by the SDK, and the whole deployment URL.
    settings = ModelSettings(
        provider="azure-openai", base_url=stub_model.origin + suffix, model="dep"
    )

    request = await sent(stub_model, settings, {"OPENAI_API_KEY": KEY})

    assert request.headers["api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["user-agent"].startswith("AsyncAzureOpenAI/Python ")
    path = "/openai/deployments/dep/chat/completions"
    assert request.path == f"{path}?api-version=2024-10-21"
    assert "max_completion_tokens" in request.json
    client = OpenAiCompatible.from_settings(settings, {"OPENAI_API_KEY": KEY})
    assert client is not None and client.endpoint == stub_model.origin + path


async def test_nvidia_adds_only_its_template_argument(stub_model: StubModel) -> None:
    settings = ModelSettings(provider="nvidia", base_url=stub_model.base_url)

    body = (await sent(stub_model, settings, {"NVIDIA_API_KEY": KEY})).json

    assert body["chat_template_kwargs"] == {"thinking": False}
    assert body["model"] == "deepseek-ai/deepseek-v4-pro-0813"
    assert body["max_tokens"] == 4096 and not SAMPLING & set(body)


async def test_an_openai_compatible_server_needs_no_key_and_gets_no_extras(
    stub_model: StubModel,
) -> None:
    settings = ModelSettings(base_url=stub_model.base_url, model="llama")

    request = await sent(stub_model, settings, {})

    assert "authorization" not in request.headers
    assert set(request.json) == {"model", "messages", "max_tokens", "tools", "stream"}


async def test_set_options_and_headers_are_sent(stub_model: StubModel) -> None:
    settings = ModelSettings(
        base_url=stub_model.base_url,
        model="m",
        headers={"X-Team": "docs"},
        temperature=0.2,
        seed=3,
        reasoning_effort="low",
        tool_choice="required",
        parallel_tool_calls=False,
        output_tokens_parameter="max_completion_tokens",
        max_output_tokens=512,
        extra_body={"top_k": 20},
    )

    request = await sent(stub_model, settings, {})

    assert request.headers["x-team"] == "docs"
    body = request.json
    assert (body["temperature"], body["seed"], body["reasoning_effort"]) == (0.2, 3, "low")
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("required", False)
    assert (body["max_completion_tokens"], body["top_k"]) == (512, 20)


@pytest.mark.parametrize(
    ("base_url", "key", "provider"),
    [
        (None, "OPENAI_API_KEY", "openai"),
        (None, "BEAM_API_KEY", "nvidia"),
        ("https://api.openai.com/v1", "BEAM_API_KEY", "openai"),
        ("https://team.openai.azure.com/openai/deployments/d", "BEAM_API_KEY", "azure-openai"),
        ("https://integrate.api.nvidia.com/v1", "OPENAI_API_KEY", "nvidia"),
        ("http://127.0.0.1:11434/v1", "OPENAI_API_KEY", "openai-compatible"),
    ],
)
def test_the_provider_is_inferred_from_the_base_url_and_key(
    base_url: str | None, key: str, provider: str
) -> None:
    environ = {key: KEY, "BEAM_MODEL": "m"}
    if base_url:
        environ["OPENAI_BASE_URL"] = base_url
    resolved = resolve(ModelSettings(), environ)
    assert resolved is not None and resolved.provider == provider


def test_precedence_override_then_file_then_beam_then_openai(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_text('[model]\nmodel = "from-file"\nbase_url = "http://127.0.0.1:9/v1"\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    monkeypatch.setenv("RIVERBEAM_MODEL__MODEL", "from-override")
    environ = {
        "RIVERBEAM_MODEL__MODEL": "from-override",
        "BEAM_API_KEY": "beam-key",
        "OPENAI_API_KEY": "openai-key",
        "BEAM_API_BASE_URL": "http://127.0.0.1:8/v1",
        "OPENAI_ORG_ID": "org-1",
    }

    resolved = resolve(load_settings().model, environ)

    assert resolved is not None
    assert (resolved.model, resolved.base_url) == ("from-override", "http://127.0.0.1:9/v1")
    assert resolved.api_key.get_secret_value() == "beam-key"
    assert resolved.sources["model"] == "env RIVERBEAM_MODEL__MODEL"
    assert resolved.sources["base_url"] == "riverbeam.toml [model]"
    assert resolved.sources["api_key"] == "env BEAM_API_KEY"
    assert resolved.sources["organization"] == "env OPENAI_ORG_ID"
    assert resolved.sources["read_timeout"] == "provider default"
    assert (resolved.connect_timeout, resolved.read_timeout, resolved.max_retries) == (
        5.0,
        600.0,
        2,
    )


def test_the_key_never_goes_in_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_text('[model]\napi_key = "sk-oops"\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))

    with pytest.raises(ConfigError, match="api_key_env") as caught:
        load_settings()

    assert "sk-oops" not in caught.value.message


def test_the_key_from_a_named_variable_or_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"{KEY}\n")
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "provider": "openai"}

    by_file = resolve(ModelSettings(**base, api_key_file=key_file), {})
    by_variable = resolve(ModelSettings(**base, api_key_env="TEAM_KEY"), {"TEAM_KEY": KEY})

    assert by_file is not None and by_variable is not None
    assert by_file.api_key.get_secret_value() == by_variable.api_key.get_secret_value() == KEY
    assert (by_file.sources["api_key"], by_variable.sources["api_key"]) == (
        f"file {key_file}",
        "env TEAM_KEY",
    )
    with pytest.raises(ConfigError, match="TEAM_KEY"):
        resolve(ModelSettings(**base, api_key_env="TEAM_KEY"), {})


@pytest.mark.parametrize("provider", ["openai", "azure-openai", "openai-compatible"])
def test_a_provider_without_a_model_name_is_a_configuration_error(provider: Any) -> None:
    settings = ModelSettings(provider=provider, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="model"):
        resolve(settings, {"OPENAI_API_KEY": KEY})


# -- per-model profiles --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-5", True),
        ("gpt-5-mini", True),
        ("openai/gpt-5-nano", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4o", False),
        ("llama-3.1-8b-instruct", False),
        ("smollm2-135m", False),
    ],
)
def test_reasoning_models_are_told_by_name(model: str, reasoning: bool) -> None:
    assert is_reasoning_model(model) is reasoning


async def test_a_reasoning_model_behind_a_proxy_drops_sampling_and_uses_max_completion_tokens(
    stub_model: StubModel,
) -> None:
    settings = ModelSettings(
        provider="openai-compatible",
        base_url=stub_model.base_url,
        model="openai/o3-mini",
        temperature=0.2,
        top_p=0.9,
    )
    request = await sent(stub_model, settings, {"OPENAI_API_KEY": KEY})

    body = request.json
    assert body["max_completion_tokens"] == 4096 and "max_tokens" not in body
    assert "temperature" not in body and "top_p" not in body
    resolved = resolve(settings, {"OPENAI_API_KEY": KEY})
    assert resolved is not None and resolved.reasoning
    assert resolved.sources["temperature"] == "dropped: the model is a reasoning model"


async def test_the_reasoning_setting_overrides_the_name(stub_model: StubModel) -> None:
    settings = ModelSettings(
        provider="openai-compatible",
        base_url=stub_model.base_url,
        model="my-o3-finetune-deployment",
        reasoning=True,
        temperature=0.2,
    )
    body = (await sent(stub_model, settings, {})).json
    assert "max_completion_tokens" in body and "temperature" not in body

    plain = settings.model_copy(update={"model": "o3", "reasoning": False})
    plain_body = (await sent(stub_model, plain, {})).json
    assert plain_body["temperature"] == 0.2 and plain_body["max_tokens"] == 4096


def test_the_openai_reasoning_efforts_are_the_official_sdks() -> None:
    from openai.types.shared.reasoning_effort import ReasoningEffort

    (literal, _none) = typing.get_args(ReasoningEffort)
    assert set(typing.get_args(literal)) == set(OPENAI_REASONING_EFFORTS)


@pytest.mark.parametrize(
    ("provider", "effort"),
    [("openai", "extreme"), ("azure-openai", "max"), ("nvidia", "minimal")],
)
def test_a_reasoning_effort_the_provider_does_not_document_is_bem_900(
    provider: str, effort: str
) -> None:
    settings = ModelSettings(
        provider=provider,  # type: ignore[arg-type]
        base_url="http://127.0.0.1:9/v1",
        model="o3",
        reasoning_effort=effort,
    )
    with pytest.raises(ConfigError) as refused:
        resolve(settings, {"OPENAI_API_KEY": KEY})
    assert refused.value.code == "BEM-900" and repr(effort) in refused.value.message


def test_the_client_refuses_an_unknown_reasoning_effort() -> None:
    with pytest.raises(ConfigError, match="reasoning_effort must be one of"):
        OpenAiCompatible("http://127.0.0.1:9/v1", KEY, "o3", reasoning_effort="extreme")
