"""``repositories.<name>.checks``: what a repository may declare, refused with BEM-900 when
the configuration is read (docs/checks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import RepositoryChecks, Settings, load_settings
from bot.core.errors import BeamError
from sandbox.inside.checks.check_catalog import CHECK_NAMES


def settings_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: str, sandbox: str = ""
) -> Settings:
    path = tmp_path / "riverbeam.toml"
    path.write_text(
        f'[repositories.docs]\nupstream = "/srv/docs.git"\n[repositories.docs.checks]\n{checks}\n'
        f"[sandbox]\n{sandbox}\n"
    )
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(path))
    return load_settings()


def test_a_declared_set_loads_with_its_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_from(
        tmp_path, monkeypatch, 'run = ["markdownlint", "links", "sphinx"]\nblock = true'
    )
    checks = settings.repositories["docs"].checks
    assert checks is not None
    assert checks.run == ("markdownlint", "links", "sphinx") and checks.block
    assert checks.timeout_seconds == 120 and checks.sphinx_source == "docs"


@pytest.mark.parametrize(
    ("checks", "needle"),
    [
        ('run = ["markdownlint", "vale"]', "'vale' is not a check"),
        ('run = ["codespell", "codespell"]', "codespell named more than once"),
        ('run = ["mkdocs", "sphinx"]', "one site build at most"),
        ("run = []", "run"),
        ('run = ["sphinx"]\nsphinx_source = "../elsewhere"', "inside the repository"),
        ('run = ["mkdocs"]\nmkdocs_config = "/etc/mkdocs.yml"', "inside the repository"),
        ('run = ["links"]\nlinters = true', "linters"),
        ('run = ["links"]\ntimeout_seconds = 0', "timeout_seconds"),
    ],
)
def test_an_unknown_or_misconfigured_check_is_bem_900(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: str, needle: str
) -> None:
    with pytest.raises(BeamError) as caught:
        settings_from(tmp_path, monkeypatch, checks)
    assert caught.value.code == "BEM-900" and needle in caught.value.message


@pytest.mark.parametrize(
    ("sandbox", "needle"),
    [
        ("checks_uid = 10001", "checks_uid must differ from uid"),
        ('check_packages = ["mkdocs-redirects"]', "name==version"),
    ],
)
def test_the_checks_sandbox_settings_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str, needle: str
) -> None:
    with pytest.raises(BeamError) as caught:
        settings_from(tmp_path, monkeypatch, 'run = ["links"]', sandbox)
    assert caught.value.code == "BEM-900" and needle in caught.value.message


def test_the_schema_lists_every_check_by_name() -> None:
    run = RepositoryChecks.model_json_schema()["properties"]["run"]
    assert run["items"] == {"type": "string", "enum": list(CHECK_NAMES)}
