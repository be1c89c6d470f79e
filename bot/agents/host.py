"""``RiverBeam``: registers agents, routes requests to them, and checks what they return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from bot.agents.echo_agent import EchoAgent
from bot.agents.memory import InMemoryStore, MemoryStore, Note
from bot.agents.registry import AgentRegistry
from bot.core.agent import Agent, AgentMetadata
from bot.core.errors import BeamError
from bot.core.frames import AgentResult, DoneFrame, ErrorFrame, Frame
from bot.core.input import AgentContext, AgentInput, Modality, ModelConfig

FrameSink = Callable[[Frame], Awaitable[None]]


class InvokeRequest(BaseModel):
    """A request for one agent: its input and the conversation so far."""

    model_config = ConfigDict(extra="forbid")

    agent_name: str
    input: AgentInput
    history: list[dict[str, JsonValue]] = Field(default_factory=list)


class RiverBeam:
    def __init__(
        self,
        *,
        memory: MemoryStore | None = None,
        model_config: ModelConfig | None = None,
    ) -> None:
        self._registry = AgentRegistry()
        self._memory: MemoryStore = memory if memory is not None else InMemoryStore()
        self._model_config = model_config or ModelConfig()

    def registry(self) -> AgentRegistry:
        return self._registry

    def register_agent(self, agent: Agent) -> AgentMetadata:
        return self._registry.register(agent)

    def register_echo_agent(self, name: str) -> AgentMetadata:
        return self._registry.register(EchoAgent(name))

    def list_agents(self) -> list[AgentMetadata]:
        return self._registry.list()

    def route(self, request: InvokeRequest) -> Agent:
        """The agent for a request, or the routing error that refuses it."""
        agent = self._registry.get(request.agent_name)
        modalities = request.input.modalities()
        non_text = sorted(m.value for m in modalities if m is not Modality.TEXT)
        if self._model_config.text_only and non_text:
            raise BeamError(
                "BEM-041",
                f"the model {self._model_config.name!r} reads text only, but the request"
                f" carries {', '.join(non_text)} content; send text, or configure a"
                " multimodal model",
            )
        supported = set(agent.metadata().supported_modalities)
        unsupported = sorted(m.value for m in modalities - supported)
        if unsupported:
            raise BeamError(
                "BEM-040",
                f"agent {request.agent_name!r} does not accept {', '.join(unsupported)}"
                f" content (it accepts {', '.join(sorted(m.value for m in supported))})",
            )
        return agent

    async def invoke(
        self, request: InvokeRequest, *, on_frame: FrameSink | None = None
    ) -> AgentResult:
        """Run the routed agent to its ``done`` frame and return the result it carries."""
        agent = self.route(request)
        context = AgentContext(
            history=request.history,
            model_config_resolved=self._model_config,
            request_metadata=request.input.metadata,
        )
        last: Frame | None = None
        async for frame in agent.stream(request.input, context):
            if on_frame is not None:
                await on_frame(frame)
            if isinstance(frame, ErrorFrame):
                raise BeamError(
                    "BEM-087",
                    f"agent {request.agent_name!r} reported an error:"
                    f" {frame.error.code}: {frame.error.message}",
                )
            last = frame
        if not isinstance(last, DoneFrame):
            ended = "no frames" if last is None else f"a {last.type!r} frame"
            raise BeamError(
                "BEM-086",
                f"agent {request.agent_name!r} ended its stream with {ended};"
                " the last frame must be 'done' carrying an AgentResult",
            )
        return last.result

    async def health_check(self) -> dict[str, bool]:
        """Each registered agent's own health check; one that raises counts as unhealthy."""
        health: dict[str, bool] = {}
        for metadata in self._registry.list():
            try:
                health[metadata.name] = await self._registry.get(metadata.name).health_check()
            except Exception:
                health[metadata.name] = False
        return health

    async def memory_remember(self, scope: str, text: str) -> Note:
        return await self._memory.remember(scope, text)

    async def memory_recall(self, scope: str, limit: int = 20) -> list[Note]:
        return await self._memory.recall(scope, limit)
