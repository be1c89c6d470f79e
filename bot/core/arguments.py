"""Tool-argument schemas in plain Python: building one (``json_params``), checking arguments
against one without a JSON Schema library (``check_arguments``), and the BEM-090 message both
checkers give (``invalid_arguments``).

``bot.core.tools.validate_arguments`` checks any tool's arguments with ``jsonschema``. The
in-container tool server checks the sandbox tools' arguments with ``check_arguments`` instead:
``jsonschema`` with ``referencing`` and ``attrs`` would be most of its start-up. It knows the
keywords the sandbox tools' schemas use (``OBJECT_KEYWORDS``, ``VALUE_KEYWORDS``), refuses a
schema with any other (``supported_schema``), and reports what ``jsonschema`` (Draft 2020-12)
would, with the same messages in the same order; ``tests/sandbox/test_tool_arguments.py``
holds the two side by side.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bot.core.errors import BeamError

__all__ = [
    "OBJECT_KEYWORDS",
    "VALUE_KEYWORDS",
    "check_arguments",
    "integers_as_int",
    "invalid_arguments",
    "json_params",
    "supported_schema",
]

MAX_REPORTED_PROBLEMS = 5
# What ``check_arguments`` knows: of the arguments object, and of each argument. The
# annotations (``description``, ``default``) check nothing.
OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
VALUE_KEYWORDS = frozenset(
    {"type", "minLength", "maxLength", "minimum", "maximum", "pattern", "description", "default"}
)
_VALUE_TYPES = ("string", "integer")

Problem = tuple[
    tuple[str, ...], str
]  # (where: the path to the value, () for the whole object; message)


def json_params(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """A JSON Schema object for tool arguments; unknown arguments are refused."""
    missing = [name for name in required if name not in properties]
    if missing:
        raise ValueError(f"required arguments without a property: {missing}")
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


def invalid_arguments(tool: str, problems: Sequence[Problem]) -> BeamError:
    """BEM-090 naming the first few problems: those of the whole object first, then by path,
    as ``validate_arguments`` always did."""
    ordered = sorted(problems, key=lambda problem: problem[0])
    details = "; ".join(
        f"{'/'.join(path)}: {message}" if path else message
        for path, message in ordered[:MAX_REPORTED_PROBLEMS]
    )
    return BeamError("BEM-090", f"{tool}: invalid arguments: {details}")


def supported_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` if ``check_arguments`` checks it as JSON Schema would: a closed object of
    named arguments, each a string or an integer, with the keywords above only; ValueError
    otherwise."""
    _known(schema, OBJECT_KEYWORDS, "the arguments object")
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ValueError("a tool's arguments are a closed object ('additionalProperties': false)")
    for name, value_schema in schema.get("properties", {}).items():
        _known(value_schema, VALUE_KEYWORDS, f"argument {name!r}")
        if value_schema.get("type") not in _VALUE_TYPES:
            raise ValueError(f"argument {name!r} must be of type 'string' or 'integer'")
    return schema


def _known(schema: Mapping[str, Any], keywords: frozenset[str], what: str) -> None:
    unknown = sorted(set(schema) - keywords)
    if unknown:
        raise ValueError(f"check_arguments does not know the keywords {unknown} of {what}")


def check_arguments(tool: str, schema: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """``args`` if they satisfy ``schema`` (one ``supported_schema`` accepts); BEM-090 saying
    what to fix otherwise."""
    if not isinstance(args, dict):
        raise BeamError("BEM-090", f"{tool}: arguments must be a JSON object")
    problems = list(_problems(schema, args))
    if problems:
        raise invalid_arguments(tool, problems)
    return integers_as_int(schema, args)


def integers_as_int(schema: Mapping[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` (already valid for ``schema``) with every value the schema types ``integer``,
    at any depth, as a Python ``int``. JSON Schema counts ``2.0`` as an integer and JSON has
    one number type, so a model may well send it; the tools behind the check then get the
    ``int`` they are written for, not a float they would trip on."""
    converted: dict[str, Any] = _as_int(schema, args)
    return converted


def _as_int(schema: Mapping[str, Any], value: Any) -> Any:
    kinds = schema.get("type")
    integer = kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds)
    if integer and isinstance(value, float) and value.is_integer():
        return int(value)
    properties = schema.get("properties")
    if isinstance(value, dict) and isinstance(properties, Mapping):
        return {name: _as_int(properties.get(name, {}), item) for name, item in value.items()}
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [_as_int(items, item) for item in value]
    return value


def _problems(schema: Mapping[str, Any], args: dict[str, Any]) -> Iterator[Problem]:
    # In the schema's keyword order, as jsonschema walks it.
    properties: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    for keyword in schema:
        if keyword == "properties":
            for name, prop in properties.items():
                if name in args:
                    yield from (((name,), message) for message in _value_problems(prop, args[name]))
        elif keyword == "required":
            for name in schema["required"]:
                if name not in args:
                    yield (), f"{name!r} is a required property"
        elif keyword == "additionalProperties":
            extras = sorted((name for name in args if name not in properties), key=str)
            if extras:
                verb = "was" if len(extras) == 1 else "were"
                listed = ", ".join(repr(name) for name in extras)
                yield (), f"Additional properties are not allowed ({listed} {verb} unexpected)"


def _value_problems(schema: Mapping[str, Any], value: Any) -> Iterator[str]:
    is_string = isinstance(value, str)
    # JSON Schema's numbers: no booleans; an integer may be written 2.0.
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    for keyword, limit in schema.items():
        if keyword == "type":
            integral = is_number and (isinstance(value, int) or value.is_integer())
            if not (is_string if limit == "string" else integral):
                yield f"{value!r} is not of type {limit!r}"
        elif keyword == "minLength" and is_string and len(value) < limit:
            yield f"{value!r} {'should be non-empty' if limit == 1 else 'is too short'}"
        elif keyword == "maxLength" and is_string and len(value) > limit:
            yield f"{value!r} {'is expected to be empty' if limit == 0 else 'is too long'}"
        elif keyword == "pattern" and is_string and not re.search(limit, value):
            yield f"{value!r} does not match {limit!r}"
        elif keyword == "minimum" and is_number and value < limit:
            yield f"{value!r} is less than the minimum of {limit!r}"
        elif keyword == "maximum" and is_number and value > limit:
            yield f"{value!r} is greater than the maximum of {limit!r}"
