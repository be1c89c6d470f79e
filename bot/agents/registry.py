"""The agents a host knows, by name."""

from __future__ import annotations

from bot.core.agent import Agent, AgentMetadata
from bot.core.errors import BeamError


class AgentRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}

    def register(self, agent: Agent) -> AgentMetadata:
        metadata = agent.metadata()
        if metadata.name in self._agents:
            raise BeamError(
                "BEM-021",
                f"an agent named {metadata.name!r} is already registered; pick another name",
            )
        self._agents[metadata.name] = agent
        return metadata

    def get(self, name: str) -> Agent:
        agent = self._agents.get(name)
        if agent is None:
            known = ", ".join(sorted(self._agents)) or "none"
            raise BeamError("BEM-020", f"no agent named {name!r} is registered (known: {known})")
        return agent

    def get_metadata(self, name: str) -> AgentMetadata:
        return self.get(name).metadata()

    def list(self) -> list[AgentMetadata]:
        return [self._agents[name].metadata() for name in sorted(self._agents)]
