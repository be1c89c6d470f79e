"""Token deltas: a streaming client's text arrives as chunk frames while the model writes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from bot.clients.base import (
    Completion,
    Message,
    StreamingCompletionClient,
    TextDelta,
)
from bot.clients.scripted import ScriptedClient
from bot.core.frames import ChunkFrame, ResultStatus
from bot.core.tools import ToolSpec
from bot.runner import ToolLoopAgent
from tests.runner.kit import call, calls, echo_tool, frames_of, kinds, result_of

Reply = list[str] | Completion | tuple[list[str], Completion]


class StreamingClient:
    """Streams each reply given as a list of pieces, then yields the whole completion."""

    model = "streamer"

    def __init__(self, replies: list[Reply], *, finish: bool = True) -> None:
        self._replies = replies
        self._finish = finish
        self.streamed = 0
        self.completed = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.completed += 1
        reply = self._replies.pop(0)
        if isinstance(reply, tuple):
            return reply[1]
        return reply if isinstance(reply, Completion) else Completion(text="".join(reply))

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[TextDelta | Completion]:
        self.streamed += 1
        reply = self._replies.pop(0)
        if isinstance(reply, tuple):
            pieces, completion = reply
            for piece in pieces:
                yield TextDelta(text=piece)
            yield completion
            return
        if isinstance(reply, Completion):
            yield reply
            return
        for piece in reply:
            yield TextDelta(text=piece)
        if self._finish:
            yield Completion(text="".join(reply), model=self.model)


def test_the_fake_is_a_streaming_client() -> None:
    assert isinstance(StreamingClient([]), StreamingCompletionClient)


async def test_deltas_become_chunk_frames_and_the_done_text_is_their_sum() -> None:
    client = StreamingClient([["The ", "page ", "is fixed."]])
    frames = await frames_of(ToolLoopAgent("helper", client, [], stream_tokens=True))
    chunks = [frame.text for frame in frames if isinstance(frame, ChunkFrame)]
    result = result_of(frames)

    assert kinds(frames) == ["placeholder", "thinking", "chunk", "chunk", "chunk", "done"]
    assert chunks == ["The ", "page ", "is fixed."]
    assert result.text == "".join(chunks) == "The page is fixed."
    assert result.model_used == "streamer"
    assert (client.streamed, client.completed) == (1, 0)


async def test_a_tool_round_then_a_streamed_answer() -> None:
    client = StreamingClient([calls(call("echo", "c1", text="x")), ["Do", "ne."]])
    frames = await frames_of(ToolLoopAgent("helper", client, [echo_tool()], stream_tokens=True))

    assert kinds(frames) == ["placeholder", "thinking", "tool", "chunk", "chunk", "done"]
    assert result_of(frames).text == "Done."


async def test_text_before_a_tool_call_is_not_glued_onto_the_next_rounds() -> None:
    said = Completion(
        text="Let me check.", tool_calls=calls(call("echo", "c1", text="x")).tool_calls
    )
    client = StreamingClient([(["Let me ", "check."], said), ["The page ", "is fine."]])
    frames = await frames_of(ToolLoopAgent("helper", client, [echo_tool()], stream_tokens=True))

    text = "".join(frame.text for frame in frames if isinstance(frame, ChunkFrame))
    assert text == "Let me check.\n\nThe page is fine."
    assert result_of(frames).text == "The page is fine."


async def test_without_stream_tokens_the_answer_is_one_chunk() -> None:
    client = StreamingClient([["The ", "answer."]])
    frames = await frames_of(ToolLoopAgent("helper", client, []))

    assert kinds(frames) == ["placeholder", "thinking", "chunk", "done"]
    assert (client.streamed, client.completed) == (0, 1)


async def test_stream_tokens_with_a_client_that_cannot_stream_uses_complete() -> None:
    frames = await frames_of(
        ToolLoopAgent("helper", ScriptedClient(["Whole."]), [], stream_tokens=True)
    )

    assert kinds(frames) == ["placeholder", "thinking", "chunk", "done"]
    assert result_of(frames).text == "Whole."


async def test_a_stream_without_a_completion_fails_with_bem_063() -> None:
    client = StreamingClient([["half an ans"]], finish=False)
    frames = await frames_of(ToolLoopAgent("helper", client, [], stream_tokens=True))
    result = result_of(frames)

    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "BEM-063"
