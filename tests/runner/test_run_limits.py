"""Run limits (``bot.runner.run_limits``): a model that keeps asking, calling or spending is
stopped with BEM-073 naming the limit, before the request or call that would go over."""

from __future__ import annotations

from bot.clients.base import Completion
from bot.clients.scripted import ScriptedClient
from bot.core.frames import ResultStatus
from bot.runner import ToolLoopAgent
from bot.runner.run_limits import RunLimits
from tests.runner.kit import call, calls, echo_tool, frames_of, result_of


def _echoes(count: int, *, tokens: int = 0) -> list[Completion | str]:
    steps: list[Completion | str] = [
        calls(call("echo", f"c{n}", text=str(n)), tokens=tokens) for n in range(count)
    ]
    return [*steps, "done"]


async def test_max_requests_stops_the_run_before_the_request_over_it() -> None:
    client = ScriptedClient(_echoes(5))
    agent = ToolLoopAgent("helper", client, [echo_tool()], limits=RunLimits(max_requests=3))

    result = result_of(await frames_of(agent))

    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "BEM-073" and "max_requests=3" in result.error.message
    assert len(client.requests) == 3


async def test_max_tool_calls_stops_the_call_over_it() -> None:
    client = ScriptedClient([calls(*(call("echo", f"c{n}", text="x") for n in range(4))), "ok"])
    agent = ToolLoopAgent("helper", client, [echo_tool()], limits=RunLimits(max_tool_calls=2))

    result = result_of(await frames_of(agent))

    assert result.error is not None and result.error.code == "BEM-073"
    assert "max_tool_calls=2" in result.error.message and len(result.tool_calls) == 2


async def test_max_total_tokens_stops_the_next_request() -> None:
    client = ScriptedClient(_echoes(5, tokens=40))
    agent = ToolLoopAgent("helper", client, [echo_tool()], limits=RunLimits(max_total_tokens=100))

    result = result_of(await frames_of(agent))

    assert result.error is not None and result.error.code == "BEM-073"
    assert "max_total_tokens=100" in result.error.message
    assert result.usage.total_tokens >= 100 and len(client.requests) == 3


async def test_the_default_limits_let_a_normal_run_finish() -> None:
    client = ScriptedClient(_echoes(6))
    agent = ToolLoopAgent("helper", client, [echo_tool()], max_rounds=10)

    result = result_of(await frames_of(agent))

    assert (result.status, len(result.tool_calls)) == (ResultStatus.COMPLETED, 6)
