"""Riverbeam: a sandboxed, git-publishing docs bot.

The public names below load on first use, so a process that needs only ``bot.core.errors`` and
``bot.core.tools`` (the tool server inside a sandbox container) does not import the model
clients, the runner or the job machinery. They are for users of the library: Riverbeam's own
modules import the module a name lives in, never this package (the ``no-root-imports``
contract), so every import it makes is one the layers see.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot import clients, runner
    from bot.agents.host import InvokeRequest, RiverBeam
    from bot.agents.memory import InMemoryStore, MemoryStore, Note
    from bot.core.agent import Agent, AgentMetadata
    from bot.core.errors import BeamError
    from bot.core.frames import (
        AgentResult,
        ChunkFrame,
        DoneFrame,
        ErrorFrame,
        Frame,
        PendingCall,
        PlaceholderFrame,
        ResultStatus,
        ThinkingFrame,
        ToolCallRecord,
        ToolFrame,
        Usage,
    )
    from bot.core.input import AgentContext, AgentInput, ContentPart, Modality, ModelConfig
    from bot.core.tools import Tool, ToolSpec, json_params

_EXPORTS = {
    "Agent": "bot.core.agent",
    "AgentContext": "bot.core.input",
    "AgentInput": "bot.core.input",
    "AgentMetadata": "bot.core.agent",
    "AgentResult": "bot.core.frames",
    "BeamError": "bot.core.errors",
    "ChunkFrame": "bot.core.frames",
    "ContentPart": "bot.core.input",
    "DoneFrame": "bot.core.frames",
    "ErrorFrame": "bot.core.frames",
    "Frame": "bot.core.frames",
    "InMemoryStore": "bot.agents.memory",
    "InvokeRequest": "bot.agents.host",
    "MemoryStore": "bot.agents.memory",
    "Modality": "bot.core.input",
    "ModelConfig": "bot.core.input",
    "Note": "bot.agents.memory",
    "PendingCall": "bot.core.frames",
    "PlaceholderFrame": "bot.core.frames",
    "ResultStatus": "bot.core.frames",
    "RiverBeam": "bot.agents.host",
    "ThinkingFrame": "bot.core.frames",
    "Tool": "bot.core.tools",
    "ToolCallRecord": "bot.core.frames",
    "ToolFrame": "bot.core.frames",
    "ToolSpec": "bot.core.tools",
    "Usage": "bot.core.frames",
    "json_params": "bot.core.tools",
}
_SUBPACKAGES = {"clients": "bot.clients", "runner": "bot.runner"}

__all__ = [
    "Agent",
    "AgentContext",
    "AgentInput",
    "AgentMetadata",
    "AgentResult",
    "BeamError",
    "ChunkFrame",
    "ContentPart",
    "DoneFrame",
    "ErrorFrame",
    "Frame",
    "InMemoryStore",
    "InvokeRequest",
    "MemoryStore",
    "Modality",
    "ModelConfig",
    "Note",
    "PendingCall",
    "PlaceholderFrame",
    "ResultStatus",
    "RiverBeam",
    "ThinkingFrame",
    "Tool",
    "ToolCallRecord",
    "ToolFrame",
    "ToolSpec",
    "Usage",
    "clients",
    "json_params",
    "runner",
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return _load(_SUBPACKAGES[name])
    if name in _EXPORTS:
        value = getattr(_load(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bot' has no attribute {name!r}")


def _load(module: str) -> ModuleType:
    # Import statements, not names for importlib: the import graph (lint-imports) sees what
    # this package can load. A name of the core loads the core alone; any other, the rest too.
    # ``import bot.x``, never ``from bot import x``: that asks this module for ``x`` first,
    # which would come back here.
    import bot.core.agent
    import bot.core.errors
    import bot.core.frames
    import bot.core.input
    import bot.core.tools

    if not module.startswith("bot.core."):
        import bot.agents.host
        import bot.agents.memory
        import bot.clients
        import bot.runner  # noqa: F401 (each import binds ``bot``: ruff sees the last unused)
    return sys.modules[module]


def __dir__() -> list[str]:
    return __all__
