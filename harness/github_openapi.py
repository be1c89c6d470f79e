"""GitHub's official REST description (``@octokit/openapi``'s ``api.github.com.json``) as a
strict judge of requests and replies, for ``harness.fake_github``.

- ``operation(method, path)``: the operation whose path template matches (the most literal
  template wins: ``/pulls/comments`` over ``/pulls/{pull_number}``), with its path values;
- ``check_request``: every path and query parameter is one the operation declares, of its
  type (an unknown query parameter is a violation); the JSON body is valid against the
  operation's ``requestBody`` schema, and a property the schema does not declare is a
  violation too (a misspelt field would otherwise pass silently: GitHub ignores it);
- ``check_reply``: the body is valid against the operation's response schema for that status;
  a status the operation does not list (a scripted 502 or 429) is held to ``basic-error``,
  the shape GitHub's errors have.

The description is OpenAPI 3.0: ``nullable: true`` becomes a ``null`` alternative, so the
schemas are read as JSON Schema 2020-12 with their ``$ref``s resolved in the document.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

DESCRIPTION = Path(
    "/opt/riverbeam-node/node_modules/@octokit/openapi/generated/api.github.com.json"
)
ERROR_SCHEMA = "#/components/schemas/basic-error"


class Violation(Exception):
    """A request or reply that GitHub's description does not allow."""


@dataclass(frozen=True)
class Operation:
    id: str
    method: str
    template: str
    spec: Mapping[str, Any]
    path_values: Mapping[str, str]


def _nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _nullable(value) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _strict(schema: Any, document: Mapping[str, Any]) -> Any:
    """``schema`` with ``additionalProperties: false`` on each object that declares its
    properties and says nothing of others: what a request may send."""
    if isinstance(schema, list):
        return [_strict(item, document) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _strict(_resolve(document, schema["$ref"]), document)
    out = {key: _strict(value, document) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not _combines(out):
        out["additionalProperties"] = False
    return out


def _combines(schema: Mapping[str, Any]) -> bool:
    return any(key in schema for key in ("allOf", "anyOf", "oneOf"))


def _resolve(document: Mapping[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


class Description:
    def __init__(self, path: Path = DESCRIPTION) -> None:
        self.document: dict[str, Any] = _nullable(json.loads(path.read_text()))
        self.version = str(self.document["info"]["version"])
        templates = []
        for template, item in self.document["paths"].items():
            # A segment may hold more than one value (``{base}...{head}``).
            pieces = re.split(r"(\{[^}]+\})", template)
            pattern = "".join(
                "([^/]+?)" if piece.startswith("{") else re.escape(piece) for piece in pieces
            )
            literal = sum(len(piece) for piece in pieces if not piece.startswith("{"))
            templates.append((-literal, template, re.compile(pattern), item))
        templates.sort(key=lambda entry: (entry[0], entry[1]))
        self._templates = templates

    def operation(self, method: str, path: str) -> Operation:
        for _, template, pattern, item in self._templates:
            found = pattern.fullmatch(path)
            if found is None:
                continue
            spec = item.get(method.lower())
            if spec is None:
                continue
            names = re.findall(r"\{([^}]+)\}", template)
            values = dict(zip(names, found.groups(), strict=True))
            return Operation(spec["operationId"], method.upper(), template, spec, values)
        raise Violation(f"{method} {path} is no operation of api.github.com.json")

    def parameters(self, operation: Operation) -> dict[tuple[str, str], dict[str, Any]]:
        item = self.document["paths"][operation.template]
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in [*item.get("parameters", []), *operation.spec.get("parameters", [])]:
            parameter = _resolve(self.document, entry["$ref"]) if "$ref" in entry else entry
            found[(parameter["in"], parameter["name"])] = parameter
        return found

    def check_request(
        self, operation: Operation, query: Mapping[str, list[str]], body: bytes | None
    ) -> Any:
        """The request's JSON body (or None), once every part of the request is allowed."""
        declared = self.parameters(operation)
        for name, value in operation.path_values.items():
            self._check_value(operation, declared[("path", name)], value)
        for name, values in query.items():
            parameter = declared.get(("query", name))
            if parameter is None:
                raise Violation(f"{operation.id}: query parameter {name!r} is not declared")
            if len(values) != 1:
                raise Violation(f"{operation.id}: query parameter {name!r} given {len(values)}x")
            self._check_value(operation, parameter, values[0])
        for (where, name), parameter in declared.items():
            if where == "query" and parameter.get("required") and name not in query:
                raise Violation(f"{operation.id}: required query parameter {name!r} is missing")
        schema = self.request_schema(operation.id, operation.template, operation.method)
        if schema is None:
            if body:
                raise Violation(f"{operation.id} takes no request body")
            return None
        if not body:
            if operation.spec["requestBody"].get("required"):
                raise Violation(f"{operation.id}: the request body is required")
            return None
        try:
            document = json.loads(body)
        except ValueError as error:
            raise Violation(f"{operation.id}: the body is not JSON: {error}") from None
        self._validate(schema, document, f"{operation.id} request body")
        return document

    def check_reply(self, operation: Operation, status: int, body: Any) -> None:
        responses = operation.spec["responses"]
        entry = responses.get(str(status))
        if entry is None:
            if status < 400:
                raise Violation(f"{operation.id} does not answer {status}")
            schema: Any = {"$ref": ERROR_SCHEMA}
        else:
            if "$ref" in entry:
                entry = _resolve(self.document, entry["$ref"])
            content = entry.get("content", {}).get("application/json")
            if content is None:
                if body is not None:
                    raise Violation(f"{operation.id} answers {status} with no body")
                return
            schema = content["schema"]
        self._validate(schema, body, f"{operation.id} {status} reply")

    @functools.cache  # noqa: B019 - one Description lives as long as the tests
    def request_schema(self, operation_id: str, template: str, method: str) -> Any:
        spec = self.document["paths"][template][method.lower()]
        body = spec.get("requestBody")
        if body is None:
            return None
        return _strict(body["content"]["application/json"]["schema"], self.document)

    def example(self, ref: str) -> Any:
        """A fresh copy of one of the description's examples (``#/components/examples/…``)."""
        return copy.deepcopy(_resolve(self.document, ref)["value"])

    def _check_value(self, operation: Operation, parameter: Mapping[str, Any], value: str) -> None:
        schema = parameter.get("schema", {})
        if "$ref" in schema:
            schema = _resolve(self.document, schema["$ref"])
        typed: Any = value
        if schema.get("type") == "integer" or schema.get("type") == ["integer", "null"]:
            if not re.fullmatch(r"-?\d+", value):
                raise Violation(f"{operation.id}: {parameter['name']}={value!r} is not an integer")
            typed = int(value)
        elif schema.get("type") == "boolean":
            if value not in ("true", "false"):
                raise Violation(f"{operation.id}: {parameter['name']}={value!r} is not a boolean")
            typed = value == "true"
        self._validate(schema, typed, f"{operation.id} parameter {parameter['name']}")

    def _validate(self, schema: Any, instance: Any, what: str) -> None:
        validator = jsonschema.Draft202012Validator(
            {**schema, "components": self.document["components"]}
        )
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise Violation(f"{what}: at {where}: {error.message[:300]}")


@functools.cache
def description() -> Description:
    return Description()
