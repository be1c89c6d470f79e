from __future__ import annotations

import pytest

from bot.clients import OpenAiCompatible
from harness.stub_model import StubModel
from tests.clients.helpers import Sleeps, make_client


@pytest.fixture(autouse=True)
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK takes up to a quarter off each backoff step at random, from ``random()`` in
    its ``_base_client`` (it has no setting for it); pinned at 0 so delays are exact. A test
    of the jitter sets its own."""
    monkeypatch.setattr("openai._base_client.random", lambda: 0.0)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(stub_model: StubModel, sleeps: Sleeps) -> OpenAiCompatible:
    return make_client(stub_model, sleeps)
