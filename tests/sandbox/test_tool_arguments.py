"""The tool server's own argument check (``bot.core.arguments``, no JSON Schema library) against
``jsonschema``, the oracle: for every sandbox tool, the same arguments pass or fail with the
same BEM-090 message, over boundary values and generated arguments."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.arguments import check_arguments, supported_schema
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec, validate_arguments
from bot.runner.state import accepted_digests, specs_digest
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.tool_schemas import (
    GIT_LOG_BEFORE_PATH,
    LIST_TREE_BEFORE_PAGES,
    READ_FILE_BEFORE_LIMIT,
    TOOL_PARAMETERS,
)
from sandbox.inside.tool_specs import EARLIER_SPECS, TOOL_SPECS

SCHEMAS = {**TOOL_PARAMETERS, "read_file (earlier)": READ_FILE_BEFORE_LIMIT}
# Values on each side of every limit the specs set, and of every JSON type.
BOUNDARY_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 20, 199, 200, 201, 10**30, 1.0, 0.5, 1.5, 200.0, 201.0,
    float("inf"), float("nan"), "", " ", "\n\t ", "x", "a b", "x" * 256, "x" * 257,
    "y" * 1024, "y" * 1025, "z" * 65536, "z" * 65537, "\ud800", [], ["main"], {}, {"a": 1},
]  # fmt: skip
EXTRA_NAMES = ["force", "verbose", "Path", "", "path ", "0"]


def outcome(check: Any, name: str, args: Any) -> tuple[str, str] | dict[str, Any]:
    try:
        return dict(check(name, args))
    except BeamError as error:
        return (error.code, error.message)


def by_jsonschema(name: str, args: Any) -> tuple[str, str] | dict[str, Any]:
    spec = ToolSpec(name=name.split()[0], description="-", parameters=SCHEMAS[name])
    return outcome(lambda _, given: validate_arguments(spec, given), name, args)


def by_check(name: str, args: Any) -> tuple[str, str] | dict[str, Any]:
    return outcome(
        lambda tool, given: check_arguments(tool.split()[0], SCHEMAS[tool], given), name, args
    )


def test_every_tool_is_checked_against_the_schema_the_model_reads() -> None:
    assert {name: spec.parameters for name, spec in TOOL_SPECS.items()} == TOOL_PARAMETERS
    assert [spec.parameters for spec in EARLIER_SPECS["read_file"]] == [
        TOOL_PARAMETERS["read_file"],
        READ_FILE_BEFORE_LIMIT,
    ]
    assert [spec.parameters for spec in EARLIER_SPECS["list_tree"]] == [LIST_TREE_BEFORE_PAGES] * 2
    assert [spec.parameters for spec in EARLIER_SPECS["git_log"]] == [GIT_LOG_BEFORE_PATH] * 2


# The nine tools' digest as the release before this one (and the pre-restructure release,
# dad8858) offered them: a run either parked is resumed by this one.
PREVIOUS_RELEASE_DIGEST = "cec6db7efd14e029925ec8777880012af6aa3dcc53b56f0e293fa9e4058613eb"


def test_a_run_parked_with_the_previous_releases_tools_is_accepted() -> None:
    accepted = accepted_digests(TOOL_SPECS.values(), EARLIER_SPECS)
    assert PREVIOUS_RELEASE_DIGEST in accepted
    assert specs_digest(TOOL_SPECS.values()) != PREVIOUS_RELEASE_DIGEST


@pytest.mark.parametrize("name", SCHEMAS)
def test_boundary_values_of_every_argument_agree_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    required = {key: "docs/a.md" if key == "path" else "x" for key in schema["required"]}
    cases: list[Any] = [
        {},
        required,
        [],
        "args",
        None,
        {**required, **dict.fromkeys(EXTRA_NAMES, 1)},
    ]
    for key in schema["properties"]:
        cases += [{**required, key: value} for value in BOUNDARY_VALUES]
    for extra in EXTRA_NAMES:
        cases.append({**required, extra: 1})
    # Several problems at once: their order, and the cut after the first five.
    for value in BOUNDARY_VALUES:
        every = dict.fromkeys(schema["properties"], value)
        cases += [{**every, **dict.fromkeys(EXTRA_NAMES, value)}, every, {"zz": value, "a": value}]
    refused = 0
    for args in cases:
        expected = by_jsonschema(name, args)
        assert by_check(name, args) == expected, args
        refused += isinstance(expected, tuple)
    assert refused > len(schema["properties"]) * 5  # the cases do reach the refusals


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(BOUNDARY_VALUES),
    lambda inner: st.lists(inner, max_size=2)
    | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(sorted(SCHEMAS)),
    data=st.data(),
)
def test_generated_arguments_agree_with_jsonschema(name: str, data: st.DataObject) -> None:
    keys = st.sampled_from([*SCHEMAS[name]["properties"], *EXTRA_NAMES]) | st.text(max_size=4)
    args = data.draw(st.dictionaries(keys, json_values, max_size=7) | json_values)
    assert by_check(name, args) == by_jsonschema(name, args)


def test_the_dispatcher_refuses_with_the_checks_message() -> None:
    args = {"limit": 0, "path": 3, "extra": True}
    with pytest.raises(BeamError) as caught:
        call_tool(None, "git_log", args)  # type: ignore[arg-type]  # refused before the tree
    assert (caught.value.code, caught.value.message) == by_jsonschema("git_log", args)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "object", "properties": {}}, "closed object"),
        ({"type": "object", "additionalProperties": False, "minProperties": 1}, "minProperties"),
        (
            {"type": "object", "additionalProperties": False, "properties": {"a": {"enum": [1]}}},
            "enum",
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": {"type": "array"}},
            },
            "'string' or 'integer'",
        ),
    ],
)
def test_a_schema_with_keywords_the_check_does_not_know_is_refused(
    schema: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        supported_schema(schema)


def test_the_message_names_the_whole_object_first_then_by_argument_and_at_most_five() -> None:
    args = {"start_line": 0.5, "limit": "9", "b": 1, "a": 1, "c": 1}
    message = (
        "read_file: invalid arguments: 'path' is a required property; Additional properties "
        "are not allowed ('a', 'b', 'c' were unexpected); limit: '9' is not of type 'integer'; "
        "start_line: 0.5 is not of type 'integer'; start_line: 0.5 is less than the minimum of 1"
    )
    for check in (by_check, by_jsonschema):
        assert check("read_file", {**args, "d": 1}) == (
            "BEM-090",
            message.replace("'c' were", "'c', 'd' were"),
        )
        assert check("read_file", {**args, "limit": 0}) == (
            "BEM-090",
            message.replace(
                "limit: '9' is not of type 'integer'", "limit: 0 is less than the minimum of 1"
            ),
        )
