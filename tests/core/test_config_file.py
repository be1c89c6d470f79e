"""A configuration file that cannot be read is BEM-900 naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.errors import BeamError


def _load(path: Path, monkeypatch: pytest.MonkeyPatch) -> BeamError:
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(path))
    with pytest.raises(BeamError) as failed:
        load_settings()
    return failed.value


def test_a_file_that_is_not_toml_is_bem_900(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_text("[api\nbroken =\n")

    error = _load(config, monkeypatch)

    assert error.code == "BEM-900"
    assert str(config) in error.message and "not valid TOML" in error.message


def test_a_file_that_cannot_be_read_is_bem_900(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "riverbeam.toml"
    config.write_bytes(b"redis_url = '\xff'\n")  # not UTF-8

    error = _load(config, monkeypatch)

    assert error.code == "BEM-900" and str(config) in error.message
