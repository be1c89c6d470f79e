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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The conformance suite's figures (tests/clients/test_conformance.py)."""
    from tests.clients.test_conformance import VALIDATED

    if VALIDATED["cases"]:
        terminalreporter.write_line(
            f"openai conformance: {VALIDATED['cases']} cases,"
            f" {VALIDATED['requests']} requests validated against completion_create_params"
        )
