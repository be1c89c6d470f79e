"""The configuration reference cannot drift from the code: every setting, with its default
and its environment variable, has a row in docs/configuration.md."""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bot.config import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REQUIRED = object()


def _settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, default) of every leaf setting; a model (optional or not) is walked into,
    a table of named tables is ``repositories.<name>``, ``forges.<name>``, and within a forge
    ``repositories.<path>``."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        named = typing.get_args(annotation)[1] if typing.get_origin(annotation) is dict else None
        optional = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if (
            len(optional) == 1
            and isinstance(optional[0], type)
            and issubclass(optional[0], BaseModel)
        ):
            # An optional table (``repositories.<name>.checks``): its keys are documented.
            annotation = optional[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _settings(annotation, f"{key}.")
        elif isinstance(named, type) and issubclass(named, BaseModel):
            placeholder = "<path>" if "<name>" in prefix else "<name>"
            yield from _settings(named, f"{key}.{placeholder}.")
        elif field.is_required():
            yield key, REQUIRED
        else:
            yield key, field.get_default(call_default_factory=True)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"
    return str(value)


def _shown(default: Any) -> str:
    if default is REQUIRED:
        return "required"
    return "none" if default is None else f"`{_toml(default)}`"


def _row(text: str, key: str) -> str | None:
    found = re.search(rf"^\| `{re.escape(key)}` \|.*$", text, re.MULTILINE)
    return found.group(0) if found else None


def test_every_setting_has_a_row_with_its_default_and_variable() -> None:
    text = DOC.read_text()
    keys = list(_settings(Settings))
    assert len(keys) > 40
    for key, default in keys:
        row = _row(text, key)
        assert row is not None, f"docs/configuration.md has no row for `{key}`"
        shown = _shown(default)
        assert shown in row, f"the row of `{key}` should show the default {shown}: {row}"
        variable = "RIVERBEAM_" + key.upper().replace(".", "__")
        assert f"`{variable}`" in row, f"the row of `{key}` should name {variable}: {row}"
