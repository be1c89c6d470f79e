"""An agent that answers ``Echo: <input>``: the smallest agent that keeps the contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

from bot.core.agent import AgentMetadata
from bot.core.frames import AgentResult, ChunkFrame, DoneFrame, Frame, ResultStatus
from bot.core.input import AgentContext, AgentInput


class EchoAgent:
    def __init__(self, name: str) -> None:
        self._metadata = AgentMetadata(
            name=name, description="Replies 'Echo: <input>'.", tags=("echo",)
        )

    def metadata(self) -> AgentMetadata:
        return self._metadata

    async def stream(self, input: AgentInput, context: AgentContext) -> AsyncIterator[Frame]:
        text = f"Echo: {input.text()}"
        yield ChunkFrame(text=text)
        yield DoneFrame(result=AgentResult(status=ResultStatus.COMPLETED, text=text))

    async def health_check(self) -> bool:
        return True
