"""A list or table setting given in an environment variable must be JSON; one that is not is
BEM-900 naming the setting and its variable, never pydantic-settings' ``SettingsError``
(which named only the top-level field and ended the CLI with exit 70 and "unexpected
error"). Every complex-typed setting of the model is tried, nested ones included."""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from bot.config import Settings, load_settings
from bot.core.errors import BeamError
from harness.stack import clean_environment
from tests.cli.kit import PROJECT_ROOT

# A key for settings that are tables of named entries ([repositories.NAME]).
ENTRY = "docs"
CONTAINERS = (list, tuple, set, frozenset, dict)


def _members(annotation: Any) -> list[Any]:
    """The types an annotation allows: Annotated and unions unwrapped, None left out."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [] if annotation is type(None) else [annotation]


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def complex_settings(
    model: type[BaseModel], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """The path of every setting whose value is a list, a table or a model, at any depth a
    variable can reach (through models, and through named tables by one entry's name)."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        for kind in _members(field.annotation):
            if _is_model(kind):
                yield path
                yield from complex_settings(kind, path)
            elif (get_origin(kind) or kind) in CONTAINERS:
                yield path
                if get_origin(kind) is dict and _is_model(get_args(kind)[1]):
                    yield from complex_settings(get_args(kind)[1], (*path, ENTRY))
            else:
                continue
            break


COMPLEX = sorted(set(complex_settings(Settings)))


def _variable(path: tuple[str, ...]) -> str:
    return "RIVERBEAM_" + "__".join(path).upper()


@pytest.fixture(autouse=True)
def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file with a repository, so a variable under it is the only thing wrong."""
    config = tmp_path / "riverbeam.toml"
    config.write_text(f'[repositories.{ENTRY}]\nupstream = "/srv/docs.git"\n')
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    return config


def test_the_model_has_the_complex_settings_of_the_issue() -> None:
    """The enumeration reaches nested settings, or the test below would prove little."""
    assert ("model", "headers") in COMPLEX
    assert ("repositories", ENTRY, "protected_refs") in COMPLEX
    assert ("api", "tokens") in COMPLEX and ("repositories",) in COMPLEX
    assert len(COMPLEX) >= 15


@pytest.mark.parametrize("path", COMPLEX, ids=".".join)
def test_a_complex_setting_that_is_not_json_is_bem_900_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...]
) -> None:
    variable = _variable(path)
    monkeypatch.setenv(variable, "notjson")
    with pytest.raises(BeamError) as caught:
        load_settings()
    assert caught.value.code == "BEM-900"
    assert f"{'.'.join(path)} (from ${variable}): " in caught.value.message


def test_json_in_the_same_variables_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIVERBEAM_MODEL__HEADERS", '{"X-Team": "docs"}')
    monkeypatch.setenv(f"RIVERBEAM_REPOSITORIES__{ENTRY.upper()}__PROTECTED_REFS", '["main"]')
    settings = load_settings()
    assert settings.model.headers == {"X-Team": "docs"}
    assert settings.repositories[ENTRY].protected_refs == ("main",)


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("RIVERBEAM_REPOSITORIES__DOCS__PROTECTED_REFS", "repositories.docs.protected_refs"),
        ("RIVERBEAM_MODEL__HEADERS", "model.headers"),
    ],
)
def test_the_issues_variables_through_the_cli_process(
    _config: Path, variable: str, key: str
) -> None:
    """The issue's two cases, through a real ``riverbeam`` process: exit 2 with BEM-900
    naming the variable, not exit 70 with "unexpected error: SettingsError"."""
    environment = clean_environment()
    environment.update(
        RIVERBEAM_CONFIG=str(_config), PYTHONPATH=str(PROJECT_ROOT), **{variable: "notjson"}
    )
    ran = subprocess.run(
        [sys.executable, "-m", "bot.cli", "jobs", "list"],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.startswith("riverbeam: BEM-900: invalid configuration")
    assert f"{key} (from ${variable}): the value is not JSON" in ran.stderr
    assert "notjson" not in ran.stderr, "the value may be a credential: it is not echoed"
    assert "Traceback" not in ran.stderr + ran.stdout
    assert "SettingsError" not in ran.stderr
