"""The agent's side of a tool call that runs in the job's container (the host end of the wire).

A ``ContainerTool`` offers the model exactly the in-process spec (``sandbox.inside.tool_specs``)
and sends each call, on a worker thread, through whatever runs tools remotely: the
``ContainerSandbox`` of the job (``sandbox.host.container.lifecycle``), which writes the
request line to the tool server and reads its reply. Where each part of a tool call runs is
the table in docs/tools.md.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from pydantic import JsonValue

from bot.core.input import AgentInput
from bot.core.tools import ToolSpec

__all__ = ["ContainerTool", "RemoteTools"]


class RemoteTools(Protocol):
    """Runs one tool elsewhere and returns its JSON result, or raises its ``BeamError``."""

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> JsonValue: ...


class ContainerTool:
    """A tool whose work happens in a container; the spec is the in-process one."""

    def __init__(self, spec: ToolSpec, sandbox: RemoteTools) -> None:
        self._spec = spec
        self._sandbox = sandbox

    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        # The round trip blocks on the container's stdio: off the event loop.
        return await asyncio.to_thread(self._sandbox.call, self._spec.name, dict(args))
