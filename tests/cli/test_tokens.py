"""``riverbeam tokens new``: the printed token authenticates against the printed table."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.config import ApiSettings
from bot.service.access import TOKEN_PREFIX, Principal, TokenRegistry
from tests.cli.kit import cli


@pytest.fixture(autouse=True)
def _configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration that registers ``docs`` and ``handbook``, the names tokens may name."""
    config = tmp_path / "riverbeam.toml"
    config.write_text(
        "".join(
            f'[repositories.{name}]\nupstream = "{tmp_path / name}.git"\n'
            for name in ("docs", "handbook")
        )
    )
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))


def _registry_and_token(*argv: str) -> tuple[TokenRegistry, str]:
    ran = cli("tokens", "new", *argv)
    assert ran.code == 0, ran.err
    token, blank, *table = ran.out.splitlines()
    assert blank == ""
    api = ApiSettings(**tomllib.loads("\n".join(table))["api"])
    return TokenRegistry(api.tokens), token


def test_the_printed_token_authenticates_as_the_printed_entry() -> None:
    registry, token = _registry_and_token(
        "--name", "ci-docs", "--role", "ci", "--repo", "docs", "--repo", "handbook"
    )

    assert token.startswith(TOKEN_PREFIX)
    assert registry.authenticate(token) == Principal(
        name="ci-docs", role="ci", repos=frozenset({"docs", "handbook"})
    )


def test_a_token_without_repositories_may_use_every_one_and_names_survive_toml() -> None:
    name = 'Ada "the reviewer" \\ Lovelace'
    registry, token = _registry_and_token("--name", name, "--role", "reviewer")

    assert registry.authenticate(token) == Principal(name=name, role="reviewer", repos=None)


def test_only_the_digest_is_in_the_table_and_each_token_is_new() -> None:
    first = cli("tokens", "new", "--name", "a", "--role", "admin")
    second = cli("tokens", "new", "--name", "a", "--role", "admin")

    token = first.out.splitlines()[0]
    assert token not in first.out.split("\n", 1)[1]
    assert token != second.out.splitlines()[0]
    assert "shown this once" in first.err
    # The API reloads tokens on SIGHUP (bot/api/reload.py): no restart is asked for.
    assert "SIGHUP" in " ".join(first.err.split()) and "restart" not in first.err


def test_an_unknown_role_is_a_usage_error() -> None:
    ran = cli("tokens", "new", "--name", "a", "--role", "owner")

    assert ran.code == 2
    assert "invalid choice: 'owner'" in ran.err and ran.out == ""


def test_an_empty_name_is_refused_and_prints_no_token() -> None:
    ran = cli("tokens", "new", "--name", "", "--role", "ci")

    assert ran.code == 2
    assert "BEM-900" in ran.err and "name" in ran.err
    assert ran.out == ""


def test_a_repository_the_configuration_does_not_register_is_refused() -> None:
    ran = cli("tokens", "new", "--name", "ci-docs", "--role", "ci", "--repo", "dcos")

    assert ran.code == 2
    assert ran.out == ""  # no token was made
    assert "BEM-900" in ran.err and "'dcos'" in ran.err
