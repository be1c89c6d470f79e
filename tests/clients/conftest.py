from __future__ import annotations

import pytest

from bot.clients import OpenAiCompatible
from harness.stub_model import StubModel
from tests.clients.helpers import Sleeps, make_client


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(stub_model: StubModel, sleeps: Sleeps) -> OpenAiCompatible:
    return make_client(stub_model, sleeps)
