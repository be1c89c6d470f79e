"""The agent contract: metadata, a stream of frames, and a health check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bot.core.frames import Frame
from bot.core.input import AgentContext, AgentInput, Modality


class AgentMetadata(BaseModel):
    """How an agent describes itself to the registry and the router."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_.-]+$")
    description: str = ""
    supported_modalities: tuple[Modality, ...] = (Modality.TEXT,)
    output_modalities: tuple[Modality, ...] = (Modality.TEXT,)
    tags: tuple[str, ...] = ()
    version: str = "0.1.0"


@runtime_checkable
class Agent(Protocol):
    """Anything that answers an ``AgentInput`` with frames, the last one ``done``."""

    def metadata(self) -> AgentMetadata: ...

    def stream(self, input: AgentInput, context: AgentContext) -> AsyncIterator[Frame]: ...

    async def health_check(self) -> bool: ...
