"""The nine sandbox tools' arguments, as JSON Schemas in plain dictionaries, and their check.

The tool server checks every call against these (``check_tool_arguments``, BEM-090) without a
JSON Schema library or pydantic, which would be most of its start-up; the specs the model
reads (``sandbox.inside.tool_specs``) carry the same dictionaries, so what is checked is what
is offered. Argument names are the contract of DESIGN §3.3.
"""

from __future__ import annotations

from typing import Any

from bot.core.arguments import check_arguments, json_params, supported_schema

__all__ = [
    "GIT_LOG_BEFORE_PATH",
    "LIST_TREE_BEFORE_PAGES",
    "MAX_LIST_ENTRIES",
    "MAX_LOG_LIMIT",
    "MAX_READ_CHARS",
    "READ_FILE_BEFORE_LIMIT",
    "TOOL_NAMES",
    "TOOL_PARAMETERS",
    "check_tool_arguments",
]

MAX_LIST_ENTRIES = 2_000
MAX_READ_CHARS = 100_000
MAX_LOG_LIMIT = 200

_PATH = {"type": "string", "maxLength": 1024}

READ_FILE_BEFORE_LIMIT = json_params(
    {
        "path": {**_PATH, "description": "File to read, like 'docs/index.md'."},
        "start_line": {
            "type": "integer",
            "minimum": 1,
            "description": "First line to return (1-based); default 1.",
        },
    },
    ["path"],
)
"""read_file's arguments before its ``limit`` (``tool_specs.EARLIER_SPECS``)."""

LIST_TREE_BEFORE_PAGES = json_params(
    {"path": {**_PATH, "description": "Directory to list; '' (default) is the root."}}, []
)
"""list_tree's arguments before it was paged (``tool_specs.EARLIER_SPECS``)."""

GIT_LOG_BEFORE_PATH = json_params(
    {
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LOG_LIMIT,
            "default": 20,
            "description": "How many commits to return.",
        }
    },
    [],
)
"""git_log's arguments before its ``path`` (``tool_specs.EARLIER_SPECS``)."""

TOOL_PARAMETERS: dict[str, dict[str, Any]] = {
    "list_tree": json_params(
        {
            **LIST_TREE_BEFORE_PAGES["properties"],
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Where the page of files starts: a 'next_offset' returned"
                " before; default 0.",
            },
        },
        [],
    ),
    "read_file": json_params(
        {
            **READ_FILE_BEFORE_LIMIT["properties"],
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Most lines to return; default: as many as fit.",
            },
        },
        ["path"],
    ),
    "write_file": json_params(
        {
            "path": {**_PATH, "description": "File to write, like 'docs/install.md'."},
            "body": {"type": "string", "description": "The complete new file content."},
        },
        ["path", "body"],
    ),
    "git_status": json_params({}, []),
    "git_diff": json_params(
        {"path": {**_PATH, "description": "Only show changes under this file or directory."}},
        [],
    ),
    "git_log": json_params(
        {
            **GIT_LOG_BEFORE_PATH["properties"],
            "path": {
                **_PATH,
                "description": "Only commits that changed this file or directory (it need"
                " not exist any more).",
            },
        },
        [],
    ),
    "git_add": json_params(
        {"path": {**_PATH, "description": "File or directory to stage; '.' for all."}},
        ["path"],
    ),
    "git_commit": json_params(
        {
            "message": {
                "type": "string",
                "minLength": 1,
                "maxLength": 65536,
                "pattern": "\\S",
                "description": "The commit message: subject line, blank line, body.",
            }
        },
        ["message"],
    ),
    "git_push": json_params(
        {
            "ref": {
                "type": "string",
                "maxLength": 256,
                "description": "Branch to push; default: the current branch.",
            }
        },
        [],
    ),
}
"""Every tool's arguments, in the order the tools are offered."""
TOOL_NAMES = tuple(TOOL_PARAMETERS)

for _schema in (READ_FILE_BEFORE_LIMIT, *TOOL_PARAMETERS.values()):
    supported_schema(_schema)  # a keyword check_arguments does not know fails here, not later


def check_tool_arguments(tool: str, args: Any) -> dict[str, Any]:
    """``args`` if they fit sandbox tool ``tool``'s arguments; BEM-090 otherwise."""
    return check_arguments(tool, TOOL_PARAMETERS[tool], args)
