"""The live-model tier: a real llama.cpp server with SmolLM2-135M-Instruct, started once for
the tier (``harness.model_server``), and the model settings that point Riverbeam at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.clients.openai_compatible import OpenAiCompatible
from bot.clients.profiles import resolve
from bot.config import ModelSettings
from harness.model_server import CONTEXT_WINDOW, MODEL_NAME, ModelServer, running_model_server


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    with running_model_server() as server:
        yield server


def live_settings(server: ModelServer, **fields: object) -> ModelSettings:
    """Settings for the server as an operator would write them: the tiny model answers
    most alike at temperature 0, and its window is the server's."""
    values: dict[str, object] = {
        "provider": "openai-compatible",
        "base_url": server.base_url,
        "model": MODEL_NAME,
        "context_window": CONTEXT_WINDOW,
        "temperature": 0,
        **fields,
    }
    return ModelSettings.model_validate(values)


def live_client(server: ModelServer, **fields: object) -> OpenAiCompatible:
    resolved = resolve(live_settings(server, **fields), {"BEAM_API_KEY": server.api_key})
    assert resolved is not None
    return OpenAiCompatible.from_resolved(resolved)
