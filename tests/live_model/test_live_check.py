"""``riverbeam model check`` against a real model server, as an operator runs it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness import figures
from harness.model_server import ModelServer
from tests.cli.kit import cli

pytestmark = [pytest.mark.live_model, pytest.mark.serial]


def test_model_check_passes_on_the_live_server(
    model_server: ModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    _configure(tmp_path, monkeypatch, model_server.model_table())

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
    table = model_server.model_table()
    del table["api_key_file"]
    _configure(tmp_path, monkeypatch, table)
    monkeypatch.setenv("BEAM_API_KEY", "not-the-servers-key")

    ran = cli("model", "check")

    assert ran.code == 1
    assert ran.out.count("BEM-061") == 3 and "401" in ran.out, ran.out


def _configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: dict[str, object]) -> None:
    """A ``riverbeam.toml`` holding the ``[model]`` table, which the CLI reads."""
    config = tmp_path / "riverbeam.toml"
    config.write_text("[model]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in model.items()))
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
