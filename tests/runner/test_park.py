"""confirm_required parks the run; RunState carries it; resume applies one decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import JsonValue

from bot.clients.base import Completion
from bot.clients.scripted import ScriptedClient
from bot.core.errors import BeamError
from bot.core.frames import PendingCall, ResultStatus, Usage
from bot.core.input import AgentContext
from bot.runner import CallDecision, RunState, ToolLoopAgent
from skills.loader import skill_by_name
from tests.runner.kit import (
    FnTool,
    call,
    calls,
    collect,
    echo_tool,
    kinds,
    publisher,
    push_tool,
    request,
    result_of,
    spec,
)

APPROVE_P1 = CallDecision(call_id="p1", approved=True, decided_by="alice")


def two_pushes() -> ScriptedClient:
    """One completion: an echo, a push, another echo and another push."""
    return ScriptedClient(
        [
            calls(
                call("echo", "c1", text="1"),
                call("push", "p1", ref="docs/a"),
                call("echo", "c2", text="2"),
                call("push", "p2", ref="docs/b"),
                tokens=10,
            ),
            "Done.",
        ]
    )


async def parked(agent: ToolLoopAgent, **fields: object) -> RunState:
    state = agent.start(request("Publish.", **fields), AgentContext())
    await collect(agent.run(state))
    return state


async def test_a_confirm_required_call_interrupts_the_run_with_it_pending(tmp_path: Path) -> None:
    side_effect = tmp_path / "pushed.json"
    agent = publisher(two_pushes(), side_effect)
    state = agent.start(request("Publish."), AgentContext())
    frames = await collect(agent.run(state))
    result = result_of(frames)

    assert kinds(frames) == ["placeholder", "thinking", "tool", "done"]
    assert result.status is ResultStatus.INTERRUPTED
    assert result.pending == PendingCall(id="p1", tool="push", arguments={"ref": "docs/a"})
    assert [r.id for r in result.tool_calls] == ["c1"]
    assert [c.id for c in state.queue] == ["c2", "p2"], "the calls after it wait too"
    assert not side_effect.exists()


@pytest.mark.parametrize(
    ("input_metadata", "context"),
    [
        ({"confirm": True}, AgentContext()),
        ({}, AgentContext(request_metadata={"confirm": True})),
    ],
)
async def test_request_metadata_cannot_approve_a_call(
    tmp_path: Path, input_metadata: dict[str, JsonValue], context: AgentContext
) -> None:
    agent = publisher(two_pushes(), tmp_path / "pushed.json")
    state = agent.start(request("Publish.", metadata=input_metadata), context)
    result = result_of(await collect(agent.run(state)))

    assert result.status is ResultStatus.INTERRUPTED
    assert result.pending is not None and result.pending.id == "p1"
    assert not (tmp_path / "pushed.json").exists()


async def test_approving_runs_the_call_then_the_rest_of_its_completion(tmp_path: Path) -> None:
    side_effect = tmp_path / "pushed.json"
    agent = publisher(two_pushes(), side_effect)
    state = await parked(agent)
    frames = await collect(agent.resume(state, APPROVE_P1))
    result = result_of(frames)

    assert json.loads(side_effect.read_text()) == {"ref": "docs/a"}
    assert kinds(frames) == ["placeholder", "thinking", "tool", "tool", "done"]
    assert result.status is ResultStatus.INTERRUPTED, "the second push parks again"
    assert result.pending is not None and result.pending.id == "p2"
    assert [r.id for r in result.tool_calls] == ["c1", "p1", "c2"]


async def test_a_refusal_is_an_answer_and_the_loop_goes_on(tmp_path: Path) -> None:
    side_effect = tmp_path / "pushed.json"
    agent = publisher(two_pushes(), side_effect)
    state = await parked(agent)
    await collect(agent.resume(state, APPROVE_P1))
    refusal = CallDecision(call_id="p2", approved=False, comment="not b", decided_by="bob")
    result = result_of(await collect(agent.resume(state, refusal)))

    assert json.loads(side_effect.read_text()) == {"ref": "docs/a"}, "p2 never ran"
    assert result.status is ResultStatus.COMPLETED
    assert result.text == "Done."
    record = result.tool_calls[-1]
    assert record.id == "p2" and not record.ok
    assert record.error is not None and record.error.code == "BEM-094"
    assert state.failures == {}, "a refusal is not a failure of the call"
    assert [d.decided_by for d in state.decisions] == ["alice", "bob"]


async def test_usage_and_records_add_up_across_segments(tmp_path: Path) -> None:
    client = ScriptedClient(
        [
            calls(call("push", "p1", ref="x"), tokens=10, model="m-1"),
            Completion.of_text("ok", usage=Usage(prompt_tokens=20, total_tokens=21)),
        ]
    )
    agent = publisher(client, tmp_path / "pushed.json")
    state = await parked(agent)
    result = result_of(await collect(agent.resume(state, APPROVE_P1)))

    assert result.status is ResultStatus.COMPLETED
    assert result.usage == Usage(prompt_tokens=30, completion_tokens=1, total_tokens=32)
    assert result.model_used == "scripted"


async def test_each_segment_gets_a_fresh_round_budget(tmp_path: Path) -> None:
    client = ScriptedClient(
        [calls(call("echo", "c1", text="a")), calls(call("push", "p1", ref="x")), "Done."]
    )
    agent = publisher(client, tmp_path / "pushed.json", max_rounds=2)
    state = await parked(agent)
    assert state.rounds == 2
    result = result_of(await collect(agent.resume(state, APPROVE_P1)))

    assert result.status is ResultStatus.COMPLETED


async def test_a_state_survives_json(tmp_path: Path) -> None:
    state = await parked(publisher(two_pushes(), tmp_path / "pushed.json"))

    assert RunState.load(state.model_dump_json()) == state
    assert RunState.load(state.model_dump_json().encode()) == state


async def test_another_version_is_bem_091(tmp_path: Path) -> None:
    state = await parked(publisher(two_pushes(), tmp_path / "pushed.json"))
    document = json.loads(state.model_dump_json())
    document["version"] = 2

    with pytest.raises(BeamError) as caught:
        RunState.load(json.dumps(document))
    assert caught.value.code == "BEM-091"
    assert "version 2" in caught.value.message


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"version": 1, "agent": 3}'])
def test_a_malformed_state_is_bem_097(text: str) -> None:
    with pytest.raises(BeamError) as caught:
        RunState.load(text)
    assert caught.value.code == "BEM-097"


async def test_a_state_resumes_only_on_the_same_agent_setup(tmp_path: Path) -> None:
    side_effect = tmp_path / "pushed.json"
    state = await parked(publisher(two_pushes(), side_effect))

    async def push_without_asking(args: dict[str, JsonValue]) -> JsonValue:
        return {"pushed": args["ref"]}

    # Same name and arguments, but no longer confirm_required: the contract changed.
    changed_push = FnTool(spec("push", ref="string"), push_without_asking)
    others = {
        "agent 'publisher', not 'other'": ToolLoopAgent(
            "other", ScriptedClient([]), [echo_tool(), push_tool(side_effect)]
        ),
        "lacks tools ['push']": ToolLoopAgent("publisher", ScriptedClient([]), [echo_tool()]),
        "tool specs": ToolLoopAgent("publisher", ScriptedClient([]), [echo_tool(), changed_push]),
        "skill None, not 'author'": ToolLoopAgent(
            "publisher",
            ScriptedClient([]),
            [echo_tool(), push_tool(side_effect)],
            skill_by_name("author"),
        ),
    }
    for expected, agent in others.items():
        with pytest.raises(BeamError) as caught:
            agent.resume(state, APPROVE_P1)
        assert caught.value.code == "BEM-092"
        assert expected in caught.value.message
    assert state.pending is not None, "a refused resume leaves the state as it was"


async def test_a_decision_must_name_the_pending_call(tmp_path: Path) -> None:
    agent = publisher(two_pushes(), tmp_path / "pushed.json")
    state = await parked(agent)

    with pytest.raises(BeamError) as caught:
        agent.resume(state, CallDecision(call_id="p2", approved=True))
    assert caught.value.code == "BEM-093"
    assert "'p1'" in caught.value.message


async def test_a_decision_applies_once(tmp_path: Path) -> None:
    side_effect = tmp_path / "pushed.json"
    agent = publisher(ScriptedClient([calls(call("push", "p1", ref="x")), "ok"]), side_effect)
    state = await parked(agent)
    await collect(agent.resume(state, APPROVE_P1))

    with pytest.raises(BeamError) as caught:
        agent.resume(state, APPROVE_P1)
    assert caught.value.code == "BEM-093"


async def test_a_run_without_a_pending_call_takes_no_decision() -> None:
    agent = ToolLoopAgent("helper", ScriptedClient(["ok"]), [])
    state = agent.start(request(), AgentContext())

    with pytest.raises(BeamError) as caught:
        agent.resume(state, APPROVE_P1)
    assert caught.value.code == "BEM-093"


async def test_run_refuses_a_parked_or_finished_state(tmp_path: Path) -> None:
    agent = publisher(two_pushes(), tmp_path / "pushed.json")
    state = await parked(agent)
    with pytest.raises(BeamError) as caught:
        agent.run(state)
    assert caught.value.code == "BEM-098"
    assert "p1" in caught.value.message

    done = ToolLoopAgent("helper", ScriptedClient(["ok"]), [])
    finished = done.start(request(), AgentContext())
    await collect(done.run(finished))
    with pytest.raises(BeamError) as caught:
        done.run(finished)
    assert caught.value.code == "BEM-098"


async def test_a_state_parked_before_the_decision_class_was_renamed_resumes(
    tmp_path: Path,
) -> None:
    # Saved by the release before ``Decision`` became ``CallDecision`` (commit 016aef0, this
    # module's two_pushes publisher): parked on p2 after alice approved p1. A class name is
    # no part of the document, so it loads, keeps its decision and runs on.
    saved = (Path(__file__).parent / "parked_before_call_decision.json").read_text()
    state = RunState.load(saved)
    assert state.decisions == [
        CallDecision(call_id="p1", approved=True, comment="a is fine", decided_by="alice")
    ]
    assert state.pending is not None and state.pending.id == "p2"
    agent = publisher(ScriptedClient(["Done."]), tmp_path / "pushed.json")

    bob = CallDecision(call_id="p2", approved=True, decided_by="bob")
    result = result_of(await collect(agent.resume(state, bob)))

    assert result.status is ResultStatus.COMPLETED and result.text == "Done."
    assert json.loads((tmp_path / "pushed.json").read_text()) == {"ref": "docs/b"}
    assert [d.decided_by for d in state.decisions] == ["alice", "bob"]
