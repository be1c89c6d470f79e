"""Provider profiles, and the model settings a client is built from.

A setting is taken from, in order: ``RIVERBEAM_MODEL__*`` (which pydantic-settings has
already folded into ``ModelSettings``), ``riverbeam.toml`` ``[model]``, the conventional
variables (``BEAM_*`` first, then ``OPENAI_*``), and last the provider profile. ``resolve``
reports where each value came from, so ``riverbeam model check`` can say.

A profile only sends what its provider expects: ``openai`` and ``openai-compatible`` send
nothing outside the OpenAI API, ``nvidia`` adds the template argument its default model
needs, ``azure-openai`` authenticates with an ``api-key`` header and an ``api-version``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from bot.config import ModelSettings, Provider, TokenParameter
from bot.core.errors import BeamError
from bot.core.factories import load_factory

KEY_VARIABLES: Final = ("BEAM_API_KEY", "GFS_BEAM_API_KEY", "NVIDIA_API_KEY", "OPENAI_API_KEY")
BASE_URL_VARIABLES: Final = ("BEAM_API_BASE_URL", "GFS_BEAM_BASE_URL", "OPENAI_BASE_URL")
MODEL_VARIABLES: Final = ("BEAM_MODEL", "GFS_BEAM_MODEL")
ORGANIZATION_VARIABLES: Final = ("OPENAI_ORG_ID",)
PROJECT_VARIABLES: Final = ("OPENAI_PROJECT_ID",)

# Like the official SDK: a connection either opens quickly or not at all, while a long
# generation may be silent for minutes before its first token.
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 600.0
DEFAULT_MAX_RETRIES: Final = 2
DEFAULT_MAX_OUTPUT_TOKENS: Final = 4096

Auth = Literal["bearer", "api-key"]

# Reasoning models, by name, on top of the provider's profile: OpenAI's o-series and gpt-5
# (not gpt-5-chat), also behind a proxy that prefixes a vendor ("openai/o3-mini"). They
# refuse temperature and top_p, and take max_completion_tokens, not max_tokens.
REASONING_MODEL: Final = re.compile(r"^(?:[\w.-]+/)*(?:o\d|gpt-5)(?![\w.]*-chat)", re.IGNORECASE)

# reasoning_effort as each provider documents it: the OpenAI API's values (those of the
# official SDK's ReasoningEffort type), Azure OpenAI's, NVIDIA's endpoints'.
OPENAI_REASONING_EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_EFFORTS: Final[Mapping[Provider, tuple[str, ...]]] = {
    "openai": OPENAI_REASONING_EFFORTS,
    "azure-openai": ("minimal", "low", "medium", "high"),
    "nvidia": ("low", "medium", "high"),
    "openai-compatible": OPENAI_REASONING_EFFORTS,
}


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is, by its name, a reasoning model (see ``REASONING_MODEL``)."""
    return REASONING_MODEL.match(model.strip()) is not None


def check_reasoning_effort(effort: str | None, provider: Provider) -> None:
    """BEM-900 for a ``reasoning_effort`` the provider does not document."""
    allowed = REASONING_EFFORTS[provider]
    if effort is not None and effort not in allowed:
        raise BeamError(
            "BEM-900",
            f"model.reasoning_effort {effort[:40]!r} is not one the {provider} provider"
            f" documents: {', '.join(allowed)}",
        )


@dataclass(frozen=True)
class Profile:
    """What a provider family needs by default."""

    name: Provider
    base_url: str | None
    model: str | None
    token_parameter: TokenParameter
    context_window: int
    auth: Auth = "bearer"
    api_version: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)


PROFILES: Final[Mapping[Provider, Profile]] = {
    "openai": Profile(
        name="openai",
        base_url="https://api.openai.com/v1",
        model=None,
        token_parameter="max_completion_tokens",
        context_window=128_000,
    ),
    "azure-openai": Profile(
        name="azure-openai",
        base_url=None,
        model=None,
        token_parameter="max_completion_tokens",
        context_window=128_000,
        auth="api-key",
        api_version="2024-10-21",
    ),
    "nvidia": Profile(
        name="nvidia",
        base_url="https://integrate.api.nvidia.com/v1",
        model="deepseek-ai/deepseek-v4-pro-0813",
        token_parameter="max_tokens",
        context_window=128_000,
        # The endpoint's default model thinks aloud unless its chat template is told not to.
        extra_body={"chat_template_kwargs": {"thinking": False}},
    ),
    "openai-compatible": Profile(
        name="openai-compatible",
        base_url=None,
        model=None,
        token_parameter="max_tokens",
        # Local servers often run with a small window; a wrong guess here only compacts early.
        context_window=32_768,
    ),
}

_HOSTS: Final[Sequence[tuple[str, Provider]]] = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure-openai"),
    (".cognitiveservices.azure.com", "azure-openai"),
    ("integrate.api.nvidia.com", "nvidia"),
)


class ResolvedModel(BaseModel):
    """Every model setting with its value in force; ``sources`` says where each came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Provider
    base_url: str
    model: str
    api_key: SecretStr
    auth: Auth
    organization: str | None
    project: str | None
    api_version: str | None
    azure_ad_token_provider: str | None
    """The factory of an Entra ID token provider (azure-openai), which stands for the key."""
    headers: dict[str, str]
    connect_timeout: float
    read_timeout: float
    max_retries: int
    max_output_tokens: int
    output_tokens_parameter: TokenParameter
    reasoning: bool
    temperature: float | None
    top_p: float | None
    seed: int | None
    parallel_tool_calls: bool | None
    reasoning_effort: str | None
    tool_choice: str | None
    extra_body: dict[str, Any]
    context_window: int
    max_result_chars: int
    max_calls_per_reply: int
    compaction: bool
    sources: dict[str, str]


def resolve(settings: ModelSettings, environ: Mapping[str, str]) -> ResolvedModel | None:
    """The settings in force, or None when no API key is found and the provider needs one
    (every provider but ``openai-compatible``, whose local servers often take none)."""
    picker = _Picker(settings, environ)
    key, key_source = _api_key(settings, environ)
    base_url = picker.pick("base_url", BASE_URL_VARIABLES)
    provider: Provider | None = picker.explicit("provider")
    if provider is None:
        provider = _provider_for(base_url, key_source)
        picker.sources["provider"] = "inferred from the base URL and key"
    profile = PROFILES[provider]
    token_provider = picker.explicit("azure_ad_token_provider")
    if token_provider is not None and provider != "azure-openai":
        raise BeamError(
            "BEM-900", f"model.azure_ad_token_provider is for azure-openai, not {provider}"
        )
    if key is None and provider != "openai-compatible" and token_provider is None:
        return None
    base_url = base_url or picker.default("base_url", profile.base_url)
    model = picker.pick("model", MODEL_VARIABLES) or picker.default("model", profile.model)
    if not base_url:
        raise BeamError("BEM-900", f"the {provider} provider needs model.base_url")
    if not model:
        raise BeamError(
            "BEM-900",
            f"the {provider} provider needs a model name: set model.model (or BEAM_MODEL)"
            + ("; for Azure it is the deployment name" if provider == "azure-openai" else ""),
        )
    picker.sources["api_key"] = key_source or (
        "none: an Entra ID token instead" if token_provider else "none"
    )
    explicit = picker.explicit
    reasoning = explicit("reasoning")
    if reasoning is None:
        reasoning = is_reasoning_model(model)
        picker.sources["reasoning"] = "inferred from the model name"
    effort = explicit("reasoning_effort")
    check_reasoning_effort(effort, provider)
    token_parameter = explicit("output_tokens_parameter")
    if token_parameter is None:
        token_parameter = "max_completion_tokens" if reasoning else profile.token_parameter
        picker.sources["output_tokens_parameter"] = (
            "the model is a reasoning model" if reasoning else "provider default"
        )
    temperature, top_p = explicit("temperature"), explicit("top_p")
    if reasoning:
        # Refused by reasoning models: dropped, and the sources say so.
        for name in ("temperature", "top_p"):
            if picker.sources.pop(name, None) is not None:
                picker.sources[name] = "dropped: the model is a reasoning model"
        temperature = top_p = None
    return ResolvedModel(
        provider=provider,
        base_url=base_url,
        model=model,
        api_key=SecretStr(key or ""),
        auth=profile.auth,
        organization=picker.pick("organization", ORGANIZATION_VARIABLES),
        project=picker.pick("project", PROJECT_VARIABLES),
        api_version=explicit("api_version") or picker.default("api_version", profile.api_version),
        azure_ad_token_provider=token_provider,
        headers=dict(settings.headers),
        connect_timeout=picker.setting("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        read_timeout=picker.setting("read_timeout", DEFAULT_READ_TIMEOUT),
        max_retries=picker.setting("max_retries", DEFAULT_MAX_RETRIES),
        max_output_tokens=picker.setting("max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
        output_tokens_parameter=token_parameter,
        reasoning=reasoning,
        temperature=temperature,
        top_p=top_p,
        seed=explicit("seed"),
        parallel_tool_calls=explicit("parallel_tool_calls"),
        reasoning_effort=effort,
        tool_choice=explicit("tool_choice"),
        extra_body={**profile.extra_body, **settings.extra_body},
        context_window=picker.setting("context_window", profile.context_window),
        max_result_chars=picker.setting("max_result_chars", settings.max_result_chars),
        max_calls_per_reply=picker.setting("max_calls_per_reply", settings.max_calls_per_reply),
        compaction=picker.setting("compaction", settings.compaction),
        sources=picker.sources,
    )


class _Picker:
    """Looks a setting up in the config, then in variables, then takes a default, noting
    where each value came from."""

    def __init__(self, settings: ModelSettings, environ: Mapping[str, str]) -> None:
        self._settings = settings
        self._environ = environ
        self.sources: dict[str, str] = {}

    def explicit(self, name: str) -> Any:
        value = getattr(self._settings, name)
        if value is not None and name in self._settings.model_fields_set:
            self.sources[name] = self._config_source(name)
            return value
        return None

    def pick(self, name: str, variables: Sequence[str]) -> str | None:
        value = self.explicit(name)
        if value is not None:
            return str(value)
        for variable in variables:
            found = self._environ.get(variable, "").strip()
            if found:
                self.sources[name] = f"env {variable}"
                return found
        return None

    def default(self, name: str, value: Any) -> Any:
        if value is not None:
            self.sources[name] = "provider default"
        return value

    def setting(self, name: str, default: Any) -> Any:
        value = self.explicit(name)
        return self.default(name, default) if value is None else value

    def _config_source(self, name: str) -> str:
        variable = f"RIVERBEAM_MODEL__{name.upper()}"
        return f"env {variable}" if variable in self._environ else "riverbeam.toml [model]"


def token_provider(resolved: ResolvedModel) -> Callable[[], Any] | None:
    """The Entra ID token provider ``model.azure_ad_token_provider`` names: its factory is
    called once, without arguments, and returns a callable the SDK calls for a token (a
    string, or an awaitable of one) before every request."""
    if resolved.azure_ad_token_provider is None:
        return None
    setting = "model.azure_ad_token_provider"
    factory = load_factory(resolved.azure_ad_token_provider, setting=setting, code="BEM-900")
    provider = factory()
    if not callable(provider):
        raise BeamError("BEM-900", f"{setting}: its factory returned no callable token provider")
    return provider


def context_window(settings: ModelSettings, environ: Mapping[str, str]) -> int:
    """The window in force without needing the key: the setting, else the profile's for the
    provider set or inferred from the base URL."""
    if settings.context_window is not None:
        return settings.context_window
    base_url = _Picker(settings, environ).pick("base_url", BASE_URL_VARIABLES)
    openai_key = bool(environ.get("OPENAI_API_KEY")) and not any(
        environ.get(variable) for variable in KEY_VARIABLES if variable != "OPENAI_API_KEY"
    )
    provider = settings.provider or _provider_for(
        base_url, "env OPENAI_API_KEY" if openai_key else None
    )
    return PROFILES[provider].context_window


def _api_key(settings: ModelSettings, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The key and where it came from (a variable or file name, never the value)."""
    if settings.api_key_file is not None:
        return _key_file(settings.api_key_file), f"file {settings.api_key_file}"
    variables = (settings.api_key_env,) if settings.api_key_env else KEY_VARIABLES
    for variable in variables:
        value = environ.get(variable, "").strip()
        if value:
            return value, f"env {variable}"
    if settings.api_key_env:
        raise BeamError(
            "BEM-900", f"model.api_key_env names {settings.api_key_env}, which is not set"
        )
    return None, None


def _key_file(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise BeamError(
            "BEM-900", f"model.api_key_file {path} cannot be read: {type(error).__name__}"
        ) from None
    if not key:
        raise BeamError("BEM-900", f"model.api_key_file {path} is empty")
    return key


def _provider_for(base_url: str | None, key_source: str | None) -> Provider:
    if base_url is None:
        # An OpenAI key and no endpoint means OpenAI; otherwise the reference's endpoint,
        # the default before providers could be chosen.
        return "openai" if key_source == "env OPENAI_API_KEY" else "nvidia"
    try:
        host = httpx.URL(base_url.strip()).host.lower()
    except httpx.InvalidURL:
        return "openai-compatible"
    for suffix, provider in _HOSTS:
        if host == suffix.lstrip(".") or host.endswith(suffix):
            return provider
    return "openai-compatible"
