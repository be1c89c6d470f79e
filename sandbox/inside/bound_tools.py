"""The nine sandbox tools as ``bot.Tool`` objects bound to one working tree, for an agent that
runs them in process (the benchmarks' floor, the tests).

Each runs ``sandbox.inside.sandbox_tools.call_tool`` on a worker thread, so the event loop
never waits on the disk, and offers the spec the model reads (``sandbox.inside.tool_specs``).
The specs bring pydantic and a JSON Schema library, which is why these wrappers are a module
of their own: the in-container tool server never imports it.
"""

from __future__ import annotations

import asyncio

from pydantic import JsonValue

from bot.core.input import AgentInput
from bot.core.tools import Tool, ToolSpec
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.tool_schemas import TOOL_NAMES
from sandbox.inside.tool_specs import TOOL_SPECS
from sandbox.inside.worktree import WorkingTree

__all__ = ["SandboxTool", "sandbox_tools"]


class SandboxTool:
    """One of the nine tools as a ``bot.Tool``, bound to one working tree."""

    def __init__(self, tree: WorkingTree, name: str) -> None:
        self._tree = tree
        self.name = name

    def __repr__(self) -> str:
        return f"SandboxTool({self.name!r}, {self._tree!r})"

    def spec(self) -> ToolSpec:
        return TOOL_SPECS[self.name]

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        # The tree is bound at construction; nothing in the request can point it elsewhere.
        result: JsonValue = await asyncio.to_thread(call_tool, self._tree, self.name, args)
        return result


def sandbox_tools(tree: WorkingTree) -> list[Tool]:
    """The nine tools of DESIGN §3.3, bound to ``tree``."""
    return [SandboxTool(tree, name) for name in TOOL_NAMES]
