"""The live-model tier: a real llama.cpp server with SmolLM2-135M-Instruct, started once for
the tier (``harness.model_server``), and the model settings that point Riverbeam at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.clients.openai_compatible import OpenAiCompatible
from bot.clients.profiles import resolve
from bot.config import ModelSettings
from harness.model_server import ModelServer, running_model_server


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    with running_model_server() as server:
        yield server


def live_client(server: ModelServer, **fields: object) -> OpenAiCompatible:
    settings = ModelSettings.model_validate(server.model_table(**fields))
    resolved = resolve(settings, {})
    assert resolved is not None
    return OpenAiCompatible.from_resolved(resolved)
