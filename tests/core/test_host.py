from collections.abc import AsyncIterator

import pytest

from bot.agents.host import InvokeRequest, RiverBeam
from bot.core.agent import AgentMetadata
from bot.core.errors import AgentContractError, BeamError, RoutingError
from bot.core.frames import (
    AgentResult,
    ChunkFrame,
    DoneFrame,
    ErrorFrame,
    ErrorInfo,
    Frame,
    PlaceholderFrame,
    ResultStatus,
)
from bot.core.input import AgentContext, AgentInput, ContentPart, Modality, ModelConfig


class FixedFrames:
    """An agent that yields the frames it was given, and records what it was called with."""

    def __init__(self, name: str, frames: list[Frame], **metadata: object) -> None:
        self._metadata = AgentMetadata(name=name, **metadata)  # type: ignore[arg-type]
        self._frames = frames
        self.calls: list[tuple[AgentInput, AgentContext]] = []

    def metadata(self) -> AgentMetadata:
        return self._metadata

    async def stream(self, input: AgentInput, context: AgentContext) -> AsyncIterator[Frame]:
        self.calls.append((input, context))
        for frame in self._frames:
            yield frame

    async def health_check(self) -> bool:
        if self._metadata.name == "broken":
            raise RuntimeError("health endpoint down")
        return True


DONE = DoneFrame(result=AgentResult(status=ResultStatus.COMPLETED, text="ok"))
IMAGE = ContentPart(modality=Modality.IMAGE, uri="https://example.invalid/a.png")


def request(agent: str, *parts: ContentPart, text: str = "hello") -> InvokeRequest:
    content = [ContentPart.of_text(text), *parts]
    return InvokeRequest(agent_name=agent, input=AgentInput(content=content))


async def test_echo_agent_replies_with_its_input() -> None:
    beam = RiverBeam()
    beam.register_echo_agent("assistant")
    seen: list[Frame] = []

    async def sink(frame: Frame) -> None:
        seen.append(frame)

    result = await beam.invoke(request("assistant", text="fix the install page"), on_frame=sink)
    assert result.text == "Echo: fix the install page"
    assert result.status is ResultStatus.COMPLETED
    assert [frame.type for frame in seen] == ["chunk", "done"]


def test_list_agents_and_metadata() -> None:
    beam = RiverBeam()
    beam.register_echo_agent("zeta")
    beam.register_agent(FixedFrames("alpha", [DONE], tags=("docs",)))
    assert [meta.name for meta in beam.list_agents()] == ["alpha", "zeta"]
    assert beam.registry().get_metadata("alpha").tags == ("docs",)


def test_unknown_agent_is_bem_020() -> None:
    beam = RiverBeam()
    beam.register_echo_agent("assistant")
    with pytest.raises(RoutingError) as caught:
        beam.registry().get_metadata("writer")
    assert caught.value.code == "BEM-020"
    assert "known: assistant" in caught.value.message


async def test_invoking_an_unknown_agent_is_bem_020() -> None:
    with pytest.raises(BeamError, match="BEM-020"):
        await RiverBeam().invoke(request("nobody"))


def test_registering_a_name_twice_is_refused() -> None:
    beam = RiverBeam()
    beam.register_echo_agent("assistant")
    with pytest.raises(BeamError, match="BEM-021"):
        beam.register_echo_agent("assistant")


async def test_non_text_content_with_the_text_only_model_fails_at_routing() -> None:
    agent = FixedFrames("vision", [DONE], supported_modalities=(Modality.TEXT, Modality.IMAGE))
    beam = RiverBeam()
    beam.register_agent(agent)
    with pytest.raises(RoutingError) as caught:
        await beam.invoke(request("vision", IMAGE))
    assert caught.value.code == "BEM-041"
    assert agent.calls == []


async def test_a_modality_the_agent_does_not_list_is_bem_040() -> None:
    agent = FixedFrames("texter", [DONE])
    beam = RiverBeam(model_config=ModelConfig(name="vision-model", text_only=False))
    beam.register_agent(agent)
    with pytest.raises(RoutingError) as caught:
        await beam.invoke(request("texter", IMAGE))
    assert caught.value.code == "BEM-040"
    assert "does not accept image" in caught.value.message
    assert agent.calls == []


async def test_a_multimodal_model_and_agent_accept_images() -> None:
    agent = FixedFrames("vision", [DONE], supported_modalities=(Modality.TEXT, Modality.IMAGE))
    beam = RiverBeam(model_config=ModelConfig(name="vision-model", text_only=False))
    beam.register_agent(agent)
    assert (await beam.invoke(request("vision", IMAGE))).text == "ok"


async def test_the_agent_gets_history_model_and_metadata_in_its_context() -> None:
    agent = FixedFrames("a", [DONE])
    beam = RiverBeam()
    beam.register_agent(agent)
    history: list[dict[str, object]] = [{"role": "user", "content": "earlier"}]
    req = InvokeRequest(
        agent_name="a",
        input=AgentInput.of_text("now", metadata={"repository": "docs"}),
        history=history,  # type: ignore[arg-type]
    )
    await beam.invoke(req)
    _, context = agent.calls[0]
    assert context.history == history
    assert context.request_metadata == {"repository": "docs"}
    assert context.model_config_resolved == ModelConfig()


@pytest.mark.parametrize(
    ("frames", "ended"),
    [
        ([], "no frames"),
        ([PlaceholderFrame(), ChunkFrame(text="hi")], "a 'chunk' frame"),
        ([DONE, ChunkFrame(text="late")], "a 'chunk' frame"),
    ],
    ids=["empty", "no-done", "frame-after-done"],
)
async def test_a_stream_that_does_not_end_with_done_is_bem_086(
    frames: list[Frame], ended: str
) -> None:
    beam = RiverBeam()
    beam.register_agent(FixedFrames("bad", frames))
    with pytest.raises(AgentContractError) as caught:
        await beam.invoke(request("bad"))
    assert caught.value.code == "BEM-086"
    assert ended in caught.value.message


async def test_an_error_frame_is_bem_087_carrying_the_cause() -> None:
    error = ErrorFrame(error=ErrorInfo(code="BEM-100", message="disk full"))
    beam = RiverBeam()
    beam.register_agent(FixedFrames("bad", [PlaceholderFrame(), error, DONE]))
    with pytest.raises(AgentContractError) as caught:
        await beam.invoke(request("bad"))
    assert caught.value.code == "BEM-087"
    assert "BEM-100: disk full" in caught.value.message


async def test_health_check_per_agent() -> None:
    beam = RiverBeam()
    beam.register_echo_agent("assistant")
    beam.register_agent(FixedFrames("broken", [DONE]))
    assert await beam.health_check() == {"assistant": True, "broken": False}


async def test_memory_remember_and_recall() -> None:
    beam = RiverBeam()
    await beam.memory_remember("docs", "  Use sentence case for headings. ")
    await beam.memory_remember("other", "Not for docs.")
    notes = await beam.memory_recall("docs")
    assert [note.text for note in notes] == ["Use sentence case for headings."]
