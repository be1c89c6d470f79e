import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from bot.core.errors import ToolLoopError
from bot.core.tools import ToolSpec, json_params, validate_arguments

SPEC = ToolSpec(
    name="word_count",
    description="Count words.",
    parameters=json_params(
        {"text": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, ["text"]
    ),
)


def test_json_params_builds_a_closed_object_schema() -> None:
    assert json_params({"a": {"type": "string"}}, ["a"]) == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }


def test_json_params_refuses_required_names_without_a_property() -> None:
    with pytest.raises(ValueError, match="without a property"):
        json_params({}, ["ghost"])


def test_valid_arguments_pass_through() -> None:
    assert validate_arguments(SPEC, {"text": "a b", "limit": 2}) == {"text": "a b", "limit": 2}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "'text' is a required property"),
        ({"text": 3}, "text: 3 is not of type 'string'"),
        ({"text": "x", "limit": 0}, "limit: 0 is less than the minimum of 1"),
        ({"text": "x", "extra": True}, "Additional properties are not allowed"),
        (["text"], "arguments must be a JSON object"),
    ],
)
def test_invalid_arguments_name_what_to_fix(args: object, fragment: str) -> None:
    with pytest.raises(ToolLoopError) as caught:
        validate_arguments(SPEC, args)
    assert caught.value.code == "BEM-090"
    assert fragment in caught.value.message


def test_a_spec_needs_an_object_schema() -> None:
    with pytest.raises(ValidationError, match="type 'object'"):
        ToolSpec(name="t", description="d", parameters={"type": "string"})


def test_a_schema_is_checked_once_however_many_specs_carry_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[object] = []
    check = Draft202012Validator.check_schema

    def counted(schema: object) -> None:
        checked.append(schema)
        check(schema)

    monkeypatch.setattr(Draft202012Validator, "check_schema", counted)
    # A schema no other test builds: the check of an earlier one is remembered.
    schema = json_params({"once": {"type": "string", "maxLength": 31337}}, ["once"])
    for name in ("a", "b", "c"):
        ToolSpec(name=name, description="d", parameters=dict(schema))
    assert checked == [schema]
    # A schema the meta-schema refuses is refused every time, never remembered as checked.
    bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    for _ in range(2):
        with pytest.raises(SchemaError):
            ToolSpec(name="t", description="d", parameters=bad)
    assert checked == [schema, bad, bad]


def test_openai_format() -> None:
    assert SPEC.openai_format() == {
        "type": "function",
        "function": {
            "name": "word_count",
            "description": "Count words.",
            "parameters": SPEC.parameters,
        },
    }
