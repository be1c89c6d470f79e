"""Every setting another part parses later is parsed when the configuration is read: a
malformed value is BEM-900 naming the key and the variable it came from, never a traceback
in a worker (or ``up``) later."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.errors import BeamError
from tests.cli.kit import cli

# (variable, value, words of the reason): each one a later layer would have choked on.
MALFORMED = [
    ("RIVERBEAM_SANDBOX__MEM_LIMIT", "lots", "should specify the units"),
    ("RIVERBEAM_SANDBOX__MEM_LIMIT", "1k", "Docker needs at least 6m"),
    ("RIVERBEAM_SANDBOX__TMPFS_SIZE", "big", "not a Docker size"),
    ("RIVERBEAM_SANDBOX__IMAGE", "Bad Image", "not a Docker image name"),
    ("RIVERBEAM_SANDBOX__IMAGE", "riverbeam-sandbox:v1", "not a Docker image name"),
    ("RIVERBEAM_SANDBOX__UID", "0", "greater than or equal to 1"),
    ("RIVERBEAM_SANDBOX__PIDS_LIMIT", "0", "greater than or equal to 1"),
    ("RIVERBEAM_SANDBOX__CALL_TIMEOUT", "-1", "greater than 0"),
    ("RIVERBEAM_SANDBOX__DEBIAN_MIRROR", "deb.debian.org", "not an http(s) URL"),
    ("RIVERBEAM_REDIS_URL", "localhost:6379", "not a Redis URL"),
    ("RIVERBEAM_REDIS_URL", "redis://localhost:port/0", "not a Redis URL"),
    ("RIVERBEAM_WORKSPACES__BRANCH_PREFIX", "bad..prefix/", "not a branch name prefix"),
    ("RIVERBEAM_MODEL__FACTORY", "bot.demo.demo_model", "'module:function'"),
    ("RIVERBEAM_JOBS__LEASE_SECONDS", "0", "greater than 0"),
    ("RIVERBEAM_JOBS__PREFIX", "two words", "should match pattern"),
    ("RIVERBEAM_API__HOST", "", "should match pattern"),
]
REPOSITORY = [
    ("protected_refs", ["release/*", "a b"], "not a list of ref patterns"),
    ("default_branch", "main..x", "not a branch name"),
    ("publish_ref", "-live", "not a branch name"),
    ("docs_build_webhook", "build.example.com/hook", "not an http(s) URL"),
    ("summary_webhook", "mailto:docs@example.com", "not an http(s) URL"),
    ("summary_schedule", "0 0 * * 9", "not a valid cron expression"),
]


@pytest.fixture(autouse=True)
def _no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(tmp_path / "none.toml"))


@pytest.mark.parametrize(("variable", "value", "reason"), MALFORMED)
def test_a_malformed_setting_is_bem_900_naming_it_and_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(BeamError) as caught:
        load_settings()
    key = variable.removeprefix("RIVERBEAM_").lower().replace("__", ".")
    assert caught.value.code == "BEM-900"
    assert f"{key} (from ${variable}): " in caught.value.message
    assert reason in caught.value.message


@pytest.mark.parametrize(("key", "value", "reason"), REPOSITORY)
def test_a_malformed_repository_setting_in_the_file_is_bem_900(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: object, reason: str
) -> None:
    config = tmp_path / "riverbeam.toml"
    shown = value if isinstance(value, list) else str(value)
    config.write_text(f'[repositories.docs]\nupstream = "/srv/docs.git"\n{key} = {_toml(shown)}\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    with pytest.raises(BeamError) as caught:
        load_settings()
    assert caught.value.code == "BEM-900"
    assert f"invalid configuration ({config})" in caught.value.message
    assert "repositories.docs" in caught.value.message and reason in caught.value.message


def _toml(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f'"{item}"' for item in value) + "]"
    return f'"{value}"'


def test_the_defaults_and_well_formed_values_load(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in (
        ("RIVERBEAM_SANDBOX__MEM_LIMIT", "1.5g"),
        ("RIVERBEAM_SANDBOX__IMAGE", "registry.example.com:5000/team/riverbeam-sandbox"),
        ("RIVERBEAM_REDIS_URL", "unix:///run/redis.sock"),
        ("RIVERBEAM_MODEL__FACTORY", "bot.demo:demo_model"),
    ):
        monkeypatch.setenv(variable, value)
    settings = load_settings()
    assert settings.sandbox.mem_limit == "1.5g"
    assert settings.model.factory == "bot.demo:demo_model"


def test_up_with_a_malformed_memory_limit_says_bem_900_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's case: ``RIVERBEAM_SANDBOX__MEM_LIMIT=lots riverbeam up``."""
    monkeypatch.setenv("RIVERBEAM_SANDBOX__MEM_LIMIT", "lots")
    ran = cli("up")
    assert ran.code == 2
    assert ran.err.startswith("riverbeam: BEM-900: invalid configuration")
    assert "sandbox.mem_limit (from $RIVERBEAM_SANDBOX__MEM_LIMIT): 'lots'" in ran.err
    assert "Traceback" not in ran.err + ran.out


def test_a_repository_name_no_job_could_name_is_bem_900(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_text('[repositories."my docs"]\nupstream = "/srv/docs.git"\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    with pytest.raises(BeamError) as caught:
        load_settings()
    assert caught.value.code == "BEM-900"
    assert "repositories.my docs.[key]: String should match pattern" in caught.value.message
