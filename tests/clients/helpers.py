"""Shared values for the model-client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from bot.clients import Completion, Message, OpenAiCompatible, TextDelta
from bot.core.tools import ToolSpec, json_params
from harness.stub_model import StubModel

KEY = "sk-riverbeam-test-5f1c0ffee0ddba11"
CONFIGURED_MODEL = "configured-model"
MESSAGES: list[Message] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What changed?"},
]
READ_FILE = ToolSpec(
    name="read_file",
    description="Read one file of the working tree.",
    parameters=json_params({"path": {"type": "string"}}, ["path"]),
)


class Sleeps:
    """Stands in for asyncio.sleep: records each requested delay and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make_client(stub: StubModel, sleeps: Sleeps, **options: Any) -> OpenAiCompatible:
    """A client for the stub; with the ``no_jitter`` fixture its backoff delays are exact."""
    settings: dict[str, Any] = {
        "sleep": sleeps,
        "read_timeout": 5.0,
        "max_retries": 4,
    }
    return OpenAiCompatible(stub.base_url, KEY, CONFIGURED_MODEL, **(settings | options))


async def collect(items: AsyncIterator[TextDelta | Completion]) -> list[TextDelta | Completion]:
    return [item async for item in items]
