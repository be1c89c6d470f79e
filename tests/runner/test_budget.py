"""The context budget: per-result cap, per-reply call cap, compaction of older results, the
never-over-budget rule, and a resumed run sending exactly what the parked run would have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from bot.clients.base import Completion, Message
from bot.clients.profiles import DEFAULT_MAX_OUTPUT_TOKENS
from bot.clients.scripted import ScriptedClient
from bot.core.frames import ResultStatus, Usage
from bot.core.input import AgentContext
from bot.core.tools import ToolSpec
from bot.runner import CallDecision, RunState, ToolLoopAgent
from bot.runner.budget import DEFAULT_CONTEXT_WINDOW, NO_BUDGET, ContextBudget, chars_of
from bot.runner.state import specs_digest
from sandbox.inside.tool_specs import EARLIER_SPECS, TOOL_SPECS
from tests.runner.kit import (
    FnTool,
    call,
    calls,
    collect,
    frames_of,
    push_tool,
    request,
    result_of,
    spec,
)

PAGE_CHARS = 20_000


def pages_tool() -> FnTool:
    """``read`` returns a page of PAGE_CHARS characters named after its argument."""

    async def work(args: dict[str, JsonValue]) -> JsonValue:
        return {"path": args["path"], "content": str(args["path"]) * (PAGE_CHARS // 4)}

    return FnTool(spec("read", path="string"), work)


def budget(**fields: Any) -> ContextBudget:
    return ContextBudget(context_window=8_000, max_output_tokens=1_000, **fields)


def reads(*paths: str) -> Completion:
    return calls(*(call("read", f"c-{path}", path=path) for path in paths))


def sent_chars(request: tuple[list[Message], list[ToolSpec]]) -> int:
    """What the loop counts: the messages and the specs."""
    messages, specs = request
    return chars_of(messages) + len(json.dumps([s.openai_format() for s in specs]))


def sent_tokens(request: tuple[list[Message], list[ToolSpec]]) -> int:
    """At the loop's default of 3 characters a token."""
    return sent_chars(request) // 3


async def test_a_long_result_goes_back_cut_with_a_note_and_is_recorded_whole() -> None:
    client = ScriptedClient([reads("ab"), "done"])
    agent = ToolLoopAgent("helper", client, [pages_tool()], budget=budget(max_result_chars=600))

    result = (await collect(agent.stream(request(), _no_history())))[-1]

    tool_message = client.requests[1][0][-1]
    assert len(tool_message["content"]) < 800
    assert "[cut: the result is" in tool_message["content"]
    assert "call read again with narrower arguments" in tool_message["content"]
    record = result.result.tool_calls[0]  # type: ignore[union-attr]
    assert len(json.dumps(record.result)) > 10 * 600


async def test_only_the_capped_number_of_calls_of_one_reply_run() -> None:
    tool = pages_tool()
    client = ScriptedClient([reads(*(f"p{n}" for n in range(7))), "done"])
    agent = ToolLoopAgent(
        "helper", client, [tool], budget=budget(max_calls_per_reply=3, max_result_chars=500)
    )

    result = result_of(await frames_of(agent))

    assert len(tool.calls) == 3 and result.status is ResultStatus.COMPLETED
    declined = [record for record in result.tool_calls if not record.ok]
    assert [record.id for record in declined] == ["c-p3", "c-p4", "c-p5", "c-p6"]
    assert {record.error.code for record in declined if record.error} == {"BEM-099"}
    # The history keeps the three calls that ran, each answered, and one note on the rest.
    history = client.requests[1][0]
    [reply] = [m for m in history if m["role"] == "assistant"]
    assert [call["id"] for call in reply["tool_calls"]] == ["c-p0", "c-p1", "c-p2"]
    answered = [m for m in history if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["c-p0", "c-p1", "c-p2"]
    assert "4 more tool calls of your reply were not run" in answered[-1]["content"]
    assert 'read({"path": "p6"})' in answered[-1]["content"]


async def test_older_results_are_compacted_and_no_request_goes_over_the_budget() -> None:
    limit = budget(max_result_chars=3_000)
    steps: list[Any] = [reads(f"page{n}") for n in range(12)] + ["done"]
    client = ScriptedClient(steps)
    agent = ToolLoopAgent("helper", client, [pages_tool()], budget=limit, max_rounds=20)
    state = agent.start(request(), _no_history())

    await collect(agent.run(state))

    assert state.status is ResultStatus.COMPLETED
    assert max(sent_tokens(sent) for sent in client.requests) <= limit.input_tokens
    assert state.compacted, "a dozen 3,000-character results must have been compacted"
    compacted_ids = {item.tool_call_id for item in state.compacted}
    last = client.requests[-1][0]
    placeholders = [m for m in last if m["role"] == "tool" and "compacted" in m["content"]]
    assert {m["tool_call_id"] for m in placeholders} == compacted_ids
    assert "call read again with" in placeholders[0]["content"]
    # The latest round is whole.
    assert "[cut:" in last[-1]["content"] and "compacted" not in last[-1]["content"]


async def test_a_hostile_burst_of_calls_never_makes_an_oversized_request() -> None:
    limit = budget()
    client = ScriptedClient([reads(*(f"big{n}" for n in range(500))), "done"])
    agent = ToolLoopAgent("helper", client, [pages_tool()], budget=limit)

    result = result_of(await frames_of(agent))

    assert result.status is ResultStatus.COMPLETED and len(client.requests) == 2
    assert sent_tokens(client.requests[-1]) <= limit.input_tokens
    assert sum(record.ok for record in result.tool_calls) == limit.max_calls_per_reply
    assert len(result.tool_calls) == 500


async def test_an_agent_built_with_defaults_keeps_a_hostile_burst_under_the_window() -> None:
    # Built from Python with no budget= at all: 500 parallel reads, then an answer.
    client = ScriptedClient([reads(*(f"big{n}" for n in range(500))), "done"])
    agent = ToolLoopAgent("helper", client, [pages_tool()])

    result = result_of(await frames_of(agent))

    assert result.status is ResultStatus.COMPLETED and len(client.requests) == 2
    largest = max(sent_tokens(request) for request in client.requests)
    assert largest <= DEFAULT_CONTEXT_WINDOW - DEFAULT_MAX_OUTPUT_TOKENS


async def test_the_budget_is_off_only_when_asked() -> None:
    client = ScriptedClient([reads(*(f"big{n}" for n in range(40))), "done"])
    agent = ToolLoopAgent("helper", client, [pages_tool()], budget=NO_BUDGET)
    state = agent.start(request(), AgentContext())

    await collect(agent.run(state))

    assert state.budget is None and len(state.records) == 40
    assert sent_tokens(client.requests[-1]) > DEFAULT_CONTEXT_WINDOW


def test_the_default_budget_takes_the_clients_window_and_output_limit() -> None:
    class Sized(ScriptedClient):
        context_window = 200_000
        max_tokens = 8_000

    assert ContextBudget.for_client(Sized([])).context_window == 200_000
    assert ContextBudget.for_client(Sized([])).max_output_tokens == 8_000
    unsized = ContextBudget.for_client(ScriptedClient([]))
    assert (unsized.context_window, unsized.max_output_tokens) == (32_768, 4_096)


async def test_a_request_that_cannot_fit_fails_with_bem_070_and_is_not_sent() -> None:
    client = ScriptedClient(["never"])
    agent = ToolLoopAgent("helper", client, [], budget=budget())

    frames = await frames_of(agent, "x" * 40_000)

    result = frames[-1].result  # type: ignore[union-attr]
    assert result.error is not None and result.error.code == "BEM-070"
    assert client.requests == []


@pytest.mark.parametrize(("prompt_tokens", "expected"), [(134, 2.0), (10, 4.0), (10_000, 1.0)])
async def test_the_estimate_is_calibrated_from_reported_prompt_tokens(
    prompt_tokens: int, expected: float
) -> None:
    usage = Usage(prompt_tokens=prompt_tokens)
    client = ScriptedClient([reads("a").model_copy(update={"usage": usage}), "done"])
    agent = ToolLoopAgent("helper", client, [pages_tool()], budget=budget())
    state = agent.start(request(), _no_history())

    await collect(agent.run(state))

    # The first request is 268 characters; a report outside 1..4 characters a token is
    # held to the bound, so an odd report cannot loosen the budget.
    assert sent_chars(client.requests[0]) == 268
    assert state.chars_per_token == pytest.approx(expected)


def _publisher_steps() -> list[Any]:
    pages = [reads(f"page{n}") for n in range(6)]
    push = calls(call("push", "c-push", ref="main"))
    return [*pages, push, *(reads(f"more{n}") for n in range(4)), "done"]


async def test_a_resumed_run_sends_exactly_what_the_parked_run_would_have(
    tmp_path: Path,
) -> None:
    limit = budget(max_result_chars=3_000)
    decision = CallDecision(call_id="c-push", approved=True, decided_by="ana")

    def agent(client: ScriptedClient, with_budget: bool) -> ToolLoopAgent:
        tools = [pages_tool(), push_tool(tmp_path / "pushed")]
        return ToolLoopAgent(
            "publisher", client, tools, budget=limit if with_budget else None, max_rounds=20
        )

    # The same process applies the decision at once ...
    straight = ScriptedClient(_publisher_steps())
    first = agent(straight, True)
    state = first.start(request(), _no_history())
    await collect(first.run(state))
    await collect(first.resume(state, decision))

    # ... while here the run is saved, loaded and resumed by an agent built without a budget.
    parked = ScriptedClient(_publisher_steps())
    before = agent(parked, True)
    saved = before.start(request(), _no_history())
    await collect(before.run(saved))
    assert saved.status is ResultStatus.INTERRUPTED
    loaded = RunState.load(saved.model_dump_json())
    resumed = ScriptedClient(_publisher_steps()[len(parked.requests) :])
    await collect(agent(resumed, False).resume(loaded, decision))

    assert parked.requests + resumed.requests == straight.requests
    assert loaded.compacted == state.compacted and loaded.compacted


async def test_a_state_saved_before_budgets_and_read_file_limit_still_resumes(
    tmp_path: Path,
) -> None:
    read_file = FnTool(TOOL_SPECS["read_file"], _fixed({"content": "x"}))
    tools = [read_file, push_tool(tmp_path / "pushed")]
    client = ScriptedClient([calls(call("push", "c-push", ref="main"))])
    old = ToolLoopAgent("publisher", client, tools)
    state = old.start(request(), _no_history())
    await collect(old.run(state))
    document = json.loads(state.model_dump_json())
    for new_field in ("budget", "chars_per_token", "compacted", "refusal"):
        del document[new_field]
    earlier = [EARLIER_SPECS["read_file"][-1], tools[1].spec()]
    document["tools_digest"] = specs_digest(earlier)

    loaded = RunState.load(json.dumps(document))
    resumed_client = ScriptedClient(["pushed"])
    decision = CallDecision(call_id="c-push", approved=True)
    await collect(ToolLoopAgent("publisher", resumed_client, tools).resume(loaded, decision))

    assert loaded.status is ResultStatus.COMPLETED and loaded.budget is None


async def test_a_state_whose_tools_changed_otherwise_is_still_refused(tmp_path: Path) -> None:
    read_file = FnTool(TOOL_SPECS["read_file"], _fixed({"content": "x"}))
    tools = [read_file, push_tool(tmp_path / "pushed")]
    agent = ToolLoopAgent("publisher", ScriptedClient([calls(call("push", "c", ref="m"))]), tools)
    state = agent.start(request(), _no_history())
    await collect(agent.run(state))
    state.tools_digest = specs_digest([TOOL_SPECS["write_file"], tools[1].spec()])

    with pytest.raises(Exception, match="BEM-092"):
        agent.resume(state, CallDecision(call_id="c", approved=True))


def _fixed(value: JsonValue) -> Any:
    async def work(args: dict[str, JsonValue]) -> JsonValue:
        return value

    return work


def _no_history() -> Any:
    from bot.core.input import AgentContext

    return AgentContext()


async def test_a_result_that_looks_like_a_placeholder_is_still_compacted() -> None:
    async def mimic(args: dict[str, JsonValue]) -> JsonValue:
        return {"compacted": "x" * 2_500}

    tool = FnTool(spec("read", path="string"), mimic)
    client = ScriptedClient([*(reads(f"page{n}") for n in range(12)), "done"])
    agent = ToolLoopAgent("helper", client, [tool], budget=budget(), max_rounds=20)
    state = agent.start(request(), _no_history())

    await collect(agent.run(state))

    assert state.status is ResultStatus.COMPLETED and state.compacted
    assert max(sent_tokens(sent) for sent in client.requests) <= budget().input_tokens
