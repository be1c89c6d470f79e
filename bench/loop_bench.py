"""The tool loop's own overhead per round, with the context budget compacting, beside the
same run with compaction off and with no budget at all.

    python -m bench.loop_bench [--rounds 60] [--runs 7] [--result-chars 20000]

A scripted model asks for one tool call a round for ``--rounds`` rounds; the tool returns
``--result-chars`` characters at once. Nothing but the loop runs: no network, no container,
so the time per round is what the loop adds to every model turn (copying the history,
estimating the request, capping results, compacting). Three configurations:

* ``compaction on``: a 32k-token window, results capped and older ones compacted;
* ``compaction off``: the same budget with compaction off (and a window big enough that the
  run never needs it, so it does not fail with BEM-070);
* ``no budget``: the loop as it was before budgets, the floor.

Medians over ``--runs`` runs are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from pydantic import JsonValue

from bot.clients.base import Completion, ToolCall
from bot.clients.scripted import ScriptedClient
from bot.core.input import AgentContext, AgentInput
from bot.core.tools import ToolSpec, json_params
from bot.runner import ToolLoopAgent
from bot.runner.budget import ContextBudget


class _Pages:
    def __init__(self, chars: int) -> None:
        self._chars = chars

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="read",
            description="Read a page.",
            parameters=json_params({"path": {"type": "string"}}, ["path"]),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        return {"path": args["path"], "content": "a docs page line\n" * (self._chars // 17)}


async def _one_run(rounds: int, chars: int, budget: ContextBudget | None) -> tuple[float, int]:
    steps: list[Completion | str] = [
        Completion.of_calls(ToolCall.of("read", {"path": f"p{n}.md"}, id=f"c{n}"))
        for n in range(rounds)
    ]
    steps.append("done")
    client = ScriptedClient(steps)
    agent = ToolLoopAgent("bench", client, [_Pages(chars)], budget=budget, max_rounds=rounds + 1)
    state = agent.start(AgentInput.of_text("Read them all."), AgentContext())
    started = time.perf_counter()
    async for _ in agent.run(state):
        pass
    elapsed = time.perf_counter() - started
    largest = max(sum(len(str(m)) for m in messages) for messages, _ in client.requests)
    return elapsed / (rounds + 1), largest


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--result-chars", type=int, default=20_000)
    options = parser.parse_args()
    window = ContextBudget(context_window=32_768, max_output_tokens=4_096)
    configurations: dict[str, ContextBudget | None] = {
        "compaction on": window,
        "compaction off": window.model_copy(
            update={"compaction": False, "context_window": 10_000_000}
        ),
        "no budget": None,
    }
    print(
        f"loop overhead per round: {options.rounds} rounds of one {options.result_chars:,}-"
        f"character tool result, median of {options.runs} runs"
    )
    for label, budget in configurations.items():
        runs = [
            asyncio.run(_one_run(options.rounds, options.result_chars, budget))
            for _ in range(options.runs)
        ]
        per_round = statistics.median(run[0] for run in runs) * 1000
        largest = runs[0][1]
        print(f"  {label:15} {per_round:8.2f} ms a round   largest request {largest:>10,} chars")


if __name__ == "__main__":
    main()
