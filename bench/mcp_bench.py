"""One MCP tool call through a job's path beside the same call made directly with the SDK.

    python -m bench.mcp_bench [--calls 200] [--runs 5] [--starts 7]

Against ``@modelcontextprotocol/server-everything`` over stdio (``harness.mcp_servers``; run
``docker/provision --dev`` first), its ``echo`` tool:

* ``direct``: ``mcp.Client.call_tool`` on a client started by hand (the floor);
* ``toolbox``: the job's tool object (``bot.jobs.toolbox.McpTool.invoke``): the same call,
  plus turning the result into what the model reads and checking its size;
* ``through a job``: a tool-loop run whose scripted model asks for one ``echo`` a round,
  every frame appended to the job's event stream in a real Redis as a worker does, the
  cancel check before each call; each call's time as its tool frame records it (the check,
  the call, the result's normalisation), beside the same run on an in-process echo tool.

And what a job segment pays once, to start the server: ``Toolbox`` (our launcher, the
server, ``initialize``, ``tools/list``) beside the SDK's client starting the same command.
Medians are printed with the ratios; nothing is asserted. The machine may be shared: run it
when nothing else does for steady figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from pydantic import JsonValue

from bot.clients.base import Completion, ToolCall
from bot.clients.scripted import ScriptedClient
from bot.config import McpSettings
from bot.core.frames import Frame, ToolFrame
from bot.core.input import AgentContext, AgentInput
from bot.core.tools import Tool, ToolSpec, json_params
from bot.jobs.toolbox import Toolbox
from bot.runner import ToolLoopAgent
from bot.runner.hooks import Hooks
from bot.store.store import JobStore
from harness.mcp_servers import everything
from harness.redis_server import running_redis

MESSAGE = {"message": "hello from the bench"}
TOOL = "everything__echo"
ECHO = ("echo", MESSAGE)


class _LocalEcho:
    """The same answer in process: the loop's and Redis's share of a round."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=TOOL,
            description="Echo.",
            parameters=json_params({"message": {"type": "string"}}, ["message"]),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        return {"content": [{"type": "text", "text": f"Echo: {args['message']}"}]}


async def _timed(calls: int, call: Callable[[], Awaitable[Any]]) -> float:
    """Median ms of ``calls`` calls."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def _job_call_ms(tool: Tool, rounds: int, store: JobStore, job_id: str) -> float:
    """Median ms of the calls of a tool-loop run of ``rounds`` rounds, as each call's tool
    frame records it (the cancel check, the call, the result's normalisation); every frame
    goes to the job's event stream in Redis, as a worker sends it."""
    steps: list[Completion | str] = [
        Completion.of_calls(ToolCall.of(TOOL, MESSAGE, id=f"c{n}")) for n in range(rounds)
    ]
    hooks = Hooks()
    durations: list[float] = []

    @hooks.on_frame
    async def publish(frame: Frame) -> None:
        store.events.append(job_id, frame)
        if isinstance(frame, ToolFrame):
            durations.append(frame.record.duration_ms)

    @hooks.before_tool
    async def before_tool(state: Any, call: Any, args: Any) -> None:
        store.jobs.cancel_requested(job_id)

    agent = ToolLoopAgent(
        "bench", ScriptedClient([*steps, "done"]), [tool], hooks=hooks, max_rounds=rounds + 1
    )
    async for _ in agent.run(agent.start(AgentInput.of_text("Echo."), AgentContext())):
        pass
    return statistics.median(durations)


async def _calls(options: argparse.Namespace, store: JobStore, job_id: str) -> dict[str, float]:
    config = everything(tools=["echo"])
    settings = McpSettings.model_validate({"servers": [config]})
    params = StdioServerParameters(command=config["command"], args=config["args"])
    ask = AgentInput.of_text("x")
    figures: dict[str, list[float]] = {}
    async with Client(params) as direct, Toolbox(settings, {"everything": ("echo",)}) as box:
        tool = box.tools[0]
        local = _LocalEcho()
        for _ in range(options.runs):
            for label, measure in (
                (
                    "direct",
                    lambda: _timed(options.calls, lambda: direct.call_tool("echo", MESSAGE)),
                ),
                ("toolbox", lambda: _timed(options.calls, lambda: tool.invoke(MESSAGE, ask))),
                ("job", lambda: _job_call_ms(tool, options.calls, store, job_id)),
                ("job, local tool", lambda: _job_call_ms(local, options.calls, store, job_id)),
            ):
                figures.setdefault(label, []).append(await measure())
    return {label: statistics.median(values) for label, values in figures.items()}


async def _starts(starts: int) -> tuple[float, float]:
    config = everything(tools=["echo"])
    settings = McpSettings.model_validate({"servers": [config]})
    params = StdioServerParameters(command=config["command"], args=config["args"])
    ours, theirs = [], []
    for _ in range(starts):
        started = time.perf_counter()
        async with Toolbox(settings, {"everything": ("echo",)}):
            ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        async with Client(params) as client:
            await client.list_tools()
            theirs.append(time.perf_counter() - started)
    return statistics.median(ours) * 1000, statistics.median(theirs) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_bench", description=__doc__)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--starts", type=int, default=7)
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="riverbeam-mcp-bench-") as scratch,
        running_redis(Path(scratch)) as redis,
    ):
        store = JobStore.from_url(redis.url, prefix="mcpbench")
        figures = asyncio.run(_calls(options, store, "bench-job"))
    direct = figures["direct"]
    print(
        f"one echo call of server-everything (stdio), median of {options.runs} runs of "
        f"{options.calls} calls"
    )
    print(f"  direct (SDK client)             {direct:8.3f} ms   1.00x")
    for label in ("toolbox", "job"):
        name = "toolbox tool (McpTool.invoke)" if label == "toolbox" else "through a job (frame)"
        print(f"  {name:31} {figures[label]:8.3f} ms   {figures[label] / direct:.2f}x")
    print(f"  the same, an in-process tool    {figures['job, local tool']:8.3f} ms")
    ours, theirs = asyncio.run(_starts(options.starts))
    print(f"server start, median of {options.starts}")
    print(f"  Toolbox (launcher, init, list)  {ours:8.1f} ms   {ours / theirs:.2f}x")
    print(f"  SDK client (init, list)         {theirs:8.1f} ms   1.00x")


if __name__ == "__main__":
    main()
