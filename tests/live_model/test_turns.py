"""Turns through Riverbeam's client and tool loop against a real model server: streamed and
not, each finish reason mapped, usage as the server counted it, a tool call the server
parsed from the model's output reaching the loop. The figures (tokens per second, one tool
round, the client's own time per request beside the server's) are recorded for the run's
summary (``harness.figures``)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx
import pytest

from bot.clients.base import Completion, Message, TextDelta
from bot.clients.openai_compatible import OpenAiCompatible
from bot.core.errors import BeamError
from bot.core.frames import ToolFrame
from bot.core.input import AgentContext
from bot.core.tools import ToolSpec
from bot.runner import ToolLoopAgent
from bot.runner.endings import check_ending
from harness import figures
from harness.model_server import ModelServer
from tests.live_model.conftest import live_client
from tests.runner.kit import collect, echo_tool, result_of
from tests.runner.kit import request as agent_input

pytestmark = [pytest.mark.live_model, pytest.mark.serial]

ANSWER: list[Message] = [{"role": "user", "content": "Reply with the single word: ready"}]
LONG: list[Message] = [{"role": "user", "content": "Write a long story about a lighthouse."}]
ECHO: list[Message] = [{"role": "user", "content": "Call the echo tool with text 'hello'."}]


async def _turn(
    client: OpenAiCompatible, messages: Sequence[Message], tools: Sequence[ToolSpec], stream: bool
) -> Completion:
    if not stream:
        return await client.complete(messages, tools)
    deltas: list[str] = []
    completion: Completion | None = None
    async for item in client.stream(messages, tools):
        if isinstance(item, TextDelta):
            deltas.append(item.text)
        else:
            completion = item
    assert completion is not None
    # What streamed is what the completion says.
    assert "".join(deltas) == (completion.text or "")
    return completion


async def _measured(
    server: ModelServer,
    node: pytest.Item,
    client: OpenAiCompatible,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    stream: bool,
) -> Completion:
    """One turn, checked against the server's own counters, with its figures recorded."""
    before = server.metrics()
    started = time.perf_counter()
    completion = await _turn(client, messages, tools, stream)
    wall = time.perf_counter() - started
    after = server.metrics()

    def grew(name: str) -> float:
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]

    usage = completion.usage
    assert usage is not None, "llama-server reports usage, streamed too"
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The server's counters: tokens it generated, and prompt tokens it read or had cached.
    assert usage.completion_tokens == grew("tokens_predicted_total")
    assert usage.prompt_tokens == grew("prompt_tokens_total") + grew("prompt_tokens_cached_total")
    server_seconds = grew("prompt_seconds_total") + grew("tokens_predicted_seconds_total")
    assert 0 < server_seconds < wall
    mode = "streamed" if stream else "whole"
    figures.measure(node, f"live_model.outside_compute_ms.{mode}", (wall - server_seconds) * 1e3)
    figures.measure(node, f"live_model.server_ms.{mode}", server_seconds * 1e3)
    if usage.completion_tokens > 1:
        generating = grew("tokens_predicted_seconds_total")
        figures.measure(node, "live_model.tokens_per_second", usage.completion_tokens / generating)
    return completion


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


@STREAMED
@pytest.mark.parametrize(
    ("limit", "messages", "ending"),
    [(64, ANSWER, "stop"), (5, LONG, "length")],
    ids=["answer", "cut"],
)
async def test_each_ending_is_mapped_and_usage_is_the_servers(
    model_server: ModelServer,
    request: pytest.FixtureRequest,
    stream: bool,
    limit: int,
    messages: list[Message],
    ending: str,
) -> None:
    """An answer ends on ``stop`` and is acted on; a reply cut at ``max_output_tokens``
    ends on ``length`` and is BEM-067, naming the limit."""
    client = live_client(model_server, max_output_tokens=limit)

    completion = await _measured(model_server, request.node, client, messages, stream=stream)

    assert completion.finish_reason == ending and completion.model
    assert (completion.text or "").strip()
    if ending == "stop":
        check_ending(completion)
        return
    assert completion.usage is not None and completion.usage.completion_tokens == limit
    with pytest.raises(BeamError) as cut:
        check_ending(completion, client.output_limit)
    assert cut.value.code == "BEM-067" and f"max_tokens={limit}" in str(cut.value)


@STREAMED
async def test_the_servers_tool_call_reaches_the_loop(
    model_server: ModelServer, request: pytest.FixtureRequest, stream: bool
) -> None:
    """The server parses the model's ``<tool_call>`` output into an OpenAI tool call; the
    loop runs it and hands the result back for the next turn."""
    client = live_client(model_server, max_output_tokens=256)
    echo = echo_tool()

    started = time.perf_counter()
    first = await _measured(model_server, request.node, client, ECHO, [echo.spec()], stream=stream)
    figures.measure(
        request.node, "live_model.tool_call_turn_ms", (time.perf_counter() - started) * 1e3
    )
    assert first.usage is not None
    figures.measure(request.node, "live_model.tool_call_turn_tokens", first.usage.completion_tokens)
    assert first.finish_reason == "tool_calls", first
    assert [call.name for call in first.tool_calls] == ["echo"]
    check_ending(first)

    agent = ToolLoopAgent("live", client, [echo], max_rounds=2, stream_tokens=stream)
    before = model_server.metrics()
    frames = await collect(agent.stream(agent_input(str(ECHO[0]["content"])), AgentContext()))
    after = model_server.metrics()

    ran = [frame.record for frame in frames if isinstance(frame, ToolFrame)]
    assert echo.calls and ran and ran[0].name == "echo", frames
    result = result_of(frames)
    # Whatever the tiny model does after the tool (answers, or calls again until the round
    # cap), the run ends with an answer or a code, counts every call it ran, and its usage
    # is what the server generated for it.
    assert len(result.tool_calls) == len(ran)
    assert result.error is not None or result.text.strip(), result
    if result.error is not None:
        assert result.error.code.startswith("BEM-"), result.error
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert result.usage.completion_tokens == generated


async def test_the_clients_own_time_beside_a_plain_http_request(
    model_server: ModelServer, request: pytest.FixtureRequest
) -> None:
    """The time a request spends outside the server's compute (the HTTP exchange, the
    server's template and parsing, and the client's own work), through Riverbeam's client
    and through a bare httpx POST of the same body, alternating: the difference is the
    client's own overhead."""
    client = live_client(model_server, max_output_tokens=16)
    body = {"model": client.model, "messages": ANSWER, "max_tokens": 16, "temperature": 0}
    headers = {"Authorization": f"Bearer {model_server.api_key}"}
    outside: dict[str, list[float]] = {"client": [], "plain_httpx": []}
    async with httpx.AsyncClient(base_url=model_server.base_url, headers=headers) as plain:
        for _ in range(5):
            for way in outside:
                before = model_server.metrics()
                started = time.perf_counter()
                if way == "client":
                    await client.complete(ANSWER, [])
                else:
                    (await plain.post("/chat/completions", json=body)).raise_for_status()
                wall = time.perf_counter() - started
                after = model_server.metrics()
                compute = sum(
                    after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]
                    for name in ("prompt_seconds_total", "tokens_predicted_seconds_total")
                )
                assert 0 < compute < wall
                outside[way].append((wall - compute) * 1e3)
    for way, values in outside.items():
        for value in values:
            figures.measure(request.node, f"live_model.outside_compute_ms.{way}", value)
