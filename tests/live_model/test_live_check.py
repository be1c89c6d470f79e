"""``riverbeam model check`` against a real model server, as an operator runs it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness import figures
from harness.model_server import CONTEXT_WINDOW, MODEL_NAME, ModelServer
from tests.cli.kit import cli

pytestmark = [pytest.mark.live_model, pytest.mark.serial]


def test_model_check_passes_on_the_live_server(
    model_server: ModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    key = tmp_path / "model-key"
    key.write_text(model_server.api_key + "\n")
    config = tmp_path / "riverbeam.toml"
    config.write_text(
        f'[model]\nbase_url = "{model_server.base_url}"\nmodel = "{MODEL_NAME}"\n'
        f'api_key_file = "{key}"\ncontext_window = {CONTEXT_WINDOW}\ntemperature = 0\n'
    )
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))

    started = time.perf_counter()
    ran = cli("model", "check")
    figures.measure(request.node, "live_model.model_check_seconds", time.perf_counter() - started)

    assert ran.code == 0, ran.out + ran.err
    assert "ok   answer" in ran.out and "ok   tool call" in ran.out, ran.out
    assert "ok   streaming usage" in ran.out and "called ping" in ran.out, ran.out
    assert model_server.api_key not in ran.out + ran.err


def test_a_wrong_key_is_refused_with_bem_061(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_text(f'[model]\nbase_url = "{model_server.base_url}"\nmodel = "{MODEL_NAME}"\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    monkeypatch.setenv("BEAM_API_KEY", "not-the-servers-key")

    ran = cli("model", "check")

    assert ran.code == 1
    assert ran.out.count("BEM-061") == 3 and "401" in ran.out, ran.out
