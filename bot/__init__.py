"""Riverbeam: a sandboxed, git-publishing docs bot.

The public names below load on first use, so a process that needs only ``bot.errors`` and
``bot.tools`` (the tool server inside a sandbox container) does not import the model
clients, the runner or the job machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot import clients, runner
    from bot.agent import Agent, AgentMetadata
    from bot.errors import BeamError
    from bot.frames import (
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
    from bot.host import InvokeRequest, RiverBeam
    from bot.input import AgentContext, AgentInput, ContentPart, Modality, ModelConfig
    from bot.memory import InMemoryStore, MemoryStore, Note
    from bot.tools import Tool, ToolSpec, json_params

_EXPORTS = {
    "Agent": "bot.agent",
    "AgentContext": "bot.input",
    "AgentInput": "bot.input",
    "AgentMetadata": "bot.agent",
    "AgentResult": "bot.frames",
    "BeamError": "bot.errors",
    "ChunkFrame": "bot.frames",
    "ContentPart": "bot.input",
    "DoneFrame": "bot.frames",
    "ErrorFrame": "bot.frames",
    "Frame": "bot.frames",
    "InMemoryStore": "bot.memory",
    "InvokeRequest": "bot.host",
    "MemoryStore": "bot.memory",
    "Modality": "bot.input",
    "ModelConfig": "bot.input",
    "Note": "bot.memory",
    "PendingCall": "bot.frames",
    "PlaceholderFrame": "bot.frames",
    "ResultStatus": "bot.frames",
    "RiverBeam": "bot.host",
    "ThinkingFrame": "bot.frames",
    "Tool": "bot.tools",
    "ToolCallRecord": "bot.frames",
    "ToolFrame": "bot.frames",
    "ToolSpec": "bot.tools",
    "Usage": "bot.frames",
    "json_params": "bot.tools",
}
_SUBPACKAGES = {"clients", "runner"}

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
        return importlib.import_module(f"bot.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bot' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
