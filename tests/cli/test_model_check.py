"""``riverbeam model check`` against the loopback provider: what it prints, its exit codes,
and that its requests are what a worker's would be (valid against the official types)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.demo import DEMO_MODEL_FACTORY, SCRIPTED_LABEL
from bot.store.models import JobKind
from harness.openai_conformance import check_request
from harness.stub_model import StubModel, completion, error, text_stream, tool_call
from tests.cli.kit import cli


@pytest.fixture
def configured(tmp_path: Path, stub_model: StubModel, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "riverbeam.toml"
    config.write_text(
        f'[model]\nbase_url = "{stub_model.base_url}"\nmodel = "local-llama"\n'
        'headers = {"X-Team" = "secret-team-token"}\nmax_retries = 0\n'
    )
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-check-0123456789")
    return config


def test_a_ready_endpoint_passes_every_check(configured: Path, stub_model: StubModel) -> None:
    stub_model.enqueue(
        completion("ready"),
        completion(None, tool_calls=[tool_call("ping", '{"value": "riverbeam"}')]),
        text_stream("rea", "dy"),
    )

    ran = cli("model", "check")

    assert ran.code == 0, ran.out + ran.err
    assert "provider   openai-compatible" in ran.out and "model      local-llama" in ran.out
    assert ran.out.count("ok  ") == 3 and "called ping" in ran.out
    assert "env OPENAI_API_KEY" in ran.out and "riverbeam.toml [model]" in ran.out
    # Neither the key nor a header's value is printed.
    assert "sk-check" not in ran.out and "secret-team-token" not in ran.out
    assert [request.json["stream"] for request in stub_model.requests] == [False, False, True]
    for request in stub_model.requests:
        check_request(request.json)


def test_no_tool_call_or_no_streamed_usage_fails_with_exit_1(
    configured: Path, stub_model: StubModel
) -> None:
    stub_model.enqueue(completion("ready"), completion("pong"), text_stream("ready", usage=None))

    ran = cli("model", "check")

    assert ran.code == 1
    assert "FAIL tool call" in ran.out and "tool calls may not be enabled" in ran.out
    assert "FAIL streaming usage" in ran.out and "include_usage" in ran.out


def test_a_refused_request_fails_with_exit_1(configured: Path, stub_model: StubModel) -> None:
    stub_model.enqueue(*[error(401, "Incorrect API key provided")] * 3)

    ran = cli("model", "check")

    assert ran.code == 1 and ran.out.count("FAIL") == 3
    assert "Incorrect API key provided" in ran.out


def _keyless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    """A configuration whose ``[model]`` table is ``model``, and no API key anywhere."""
    config = tmp_path / "riverbeam.toml"
    config.write_text(f"[model]\n{model}\n")
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    for variable in ("BEAM_API_KEY", "GFS_BEAM_API_KEY", "NVIDIA_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def test_no_key_for_a_provider_that_needs_one_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keyless(tmp_path, monkeypatch, 'provider = "openai"\nmodel = "gpt-x"')

    ran = cli("model", "check")

    assert ran.code == 2 and "BEM-508" in ran.err


def test_the_scripted_demo_model_is_named_and_checked_without_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keyless(tmp_path, monkeypatch, f'factory = "{DEMO_MODEL_FACTORY}"')

    ran = cli("model", "check")

    assert ran.code == 0, ran.out + ran.err
    assert "BEM-508" not in ran.out + ran.err
    assert f"factory    {DEMO_MODEL_FACTORY}" in ran.out and "no API key is needed" in ran.out
    assert SCRIPTED_LABEL in ran.out
    for kind in JobKind:
        assert f"ok   {kind} job" in ran.out, ran.out
    assert "riverbeam-demo-script: calls list_tree" in ran.out


def test_a_factory_that_cannot_be_loaded_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keyless(tmp_path, monkeypatch, 'factory = "bot.demo:no_such_model"')

    ran = cli("model", "check")

    assert ran.code == 2 and "BEM-508" in ran.err and "no function no_such_model" in ran.err
