"""The tool contract: a spec the model reads, and an ``invoke`` that does the work."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Final, Protocol, runtime_checkable

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from bot.core.arguments import integers_as_int, invalid_arguments, json_params
from bot.core.errors import BeamError
from bot.core.input import AgentInput

__all__ = [
    "MCP_ALLOWLIST_PATTERN",
    "MCP_SEPARATOR",
    "MCP_SERVER_NAME_PATTERN",
    "TOOL_NAME_PATTERN",
    "Tool",
    "ToolSpec",
    "allowlist_name",
    "json_params",
    "mcp_call",
    "mcp_tool_name",
    "validate_arguments",
]

TOOL_NAME_PATTERN: Final = r"^[a-zA-Z0-9_-]{1,64}$"
"""What a tool may be called: 1 to 64 letters, digits, '_' or '-'."""

MCP_SEPARATOR: Final = "__"
"""Joins an MCP server's name and its tool's name into the name the model sees: a skill's
``everything.echo`` is offered as ``everything__echo`` (function names may hold no dot).
Server names never contain it, so the first one splits a name back unambiguously."""


MCP_SERVER_NAME_PATTERN: Final = r"^[a-z][a-z0-9-]{0,31}(?:_[a-z0-9-]{1,31}){0,7}$"
"""What an MCP server may be called: lower case, digits, '-' and single '_' between them (no
dot, no '__', no trailing '_'), so ``server__tool`` splits back to exactly one server."""

MCP_ALLOWLIST_PATTERN: Final = r"^([a-z][a-z0-9_-]*)\.([A-Za-z0-9_-]+)$"
"""How a skill's allowlist names an MCP tool: ``server.tool``."""


def mcp_tool_name(server: str, tool: str) -> str:
    """The model-facing name of MCP tool ``tool`` of ``server``."""
    return f"{server}{MCP_SEPARATOR}{tool}"


def mcp_call(name: str) -> tuple[str, str] | None:
    """(server, tool) of the MCP tool the model knows as ``name``; None for another tool."""
    server, separator, tool = name.partition(MCP_SEPARATOR)
    return (server, tool) if separator and server and tool else None


def allowlist_name(name: str) -> str:
    """How a skill's allowlist names the tool the model knows as ``name``: ``server.tool``
    for an MCP tool, the name itself for every other tool."""
    mcp = mcp_call(name)
    return f"{mcp[0]}.{mcp[1]}" if mcp else name


class ToolSpec(BaseModel):
    """What the model sees of a tool. ``parameters`` is a JSON Schema object."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str
    confirm_required: bool = False
    parameters: dict[str, Any] = Field(default_factory=lambda: json_params({}, []))

    @field_validator("parameters")
    @classmethod
    def _is_object_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        _check_schema(json.dumps(schema, sort_keys=True, separators=(",", ":")))
        if schema.get("type") != "object":
            raise ValueError("tool parameters must be a JSON Schema of type 'object'")
        return schema

    def openai_format(self) -> dict[str, Any]:
        """The spec as an entry of an OpenAI chat request's ``tools`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@lru_cache(maxsize=1024)
def _check_schema(canonical: str) -> None:
    """Check a schema against the JSON Schema meta-schema, once per distinct schema: the check
    costs milliseconds, and tools build their specs anew for every agent (every job segment).
    A failed check raises, so it is never cached."""
    Draft202012Validator.check_schema(json.loads(canonical))


@runtime_checkable
class Tool(Protocol):
    def spec(self) -> ToolSpec: ...

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue: ...


def validate_arguments(spec: ToolSpec, args: Any) -> dict[str, JsonValue]:
    """Check arguments against the tool's schema; BEM-090 says what to fix."""
    if not isinstance(args, dict):
        raise BeamError("BEM-090", f"{spec.name}: arguments must be a JSON object")
    validator = Draft202012Validator(spec.parameters)
    problems = [
        (tuple(str(part) for part in problem.path), str(problem.message))
        for problem in validator.iter_errors(args)
    ]
    if problems:
        raise invalid_arguments(spec.name, problems)
    return integers_as_int(spec.parameters, args)
