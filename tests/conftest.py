"""Fixtures every test shares. Keep this file to cross-cutting concerns."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator

import pytest

from bot.clients import openai_compatible
from harness import figures
from harness.stub_model import StubModel
from sandbox.host.workspace.overlay import detach_under

# Variables that would point a client at a real endpoint, hand it a real key, or route its
# requests through a proxy (httpx reads the proxy variables itself); and the terminal's size,
# which pytest-xdist's workers have set (COLUMNS=80): the CLI prints at its pipe width in a
# test, however pytest was started.
_ENV_PREFIXES = ("BEAM_", "GFS_", "OPENAI_")
_ENV_NAMES = frozenset(
    {"NVIDIA_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "COLUMNS", "LINES"}
)


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without model credentials, endpoints, proxies or a terminal size from
    the shell."""
    for name in list(os.environ):
        if name.upper() in _ENV_NAMES or name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True, scope="session")
def _no_remote_model_requests() -> Iterator[None]:
    """No test may talk to a real model endpoint; loopback (the stub) stays allowed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai_compatible, "ALLOW_REMOTE_MODEL_REQUESTS", False)
        yield


@pytest.fixture(autouse=True, scope="session")
def _views_detached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The job views tests mounted under their temporary directories go at the end, so
    that those directories can be deleted (pytest keeps the last three runs')."""
    yield
    detach_under(tmp_path_factory.getbasetemp())


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    """A scripted OpenAI-compatible server on loopback; see harness/stub_model.py."""
    with StubModel() as stub:
        yield stub


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts tests recorded (``harness.figures``), from every worker of the run."""
    totals = figures.totals(terminalreporter.stats)
    measured = figures.measurements(terminalreporter.stats)
    if totals or measured:
        terminalreporter.section("figures")
        for name, total in sorted(totals.items()):
            terminalreporter.write_line(f"{name}: {total}")
        for name, values in sorted(measured.items()):
            terminalreporter.write_line(
                f"{name}: median {statistics.median(values):.4g} of {len(values)}"
            )
