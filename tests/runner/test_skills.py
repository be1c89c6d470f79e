"""Skills: the system prompt, the tool allowlist, and confirm_first."""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from bot.clients.base import Message
from bot.clients.scripted import ScriptedClient
from bot.core.errors import BeamError
from bot.core.frames import ResultStatus
from bot.core.input import AgentContext
from bot.core.tools import ToolSpec
from bot.runner import ToolLoopAgent
from skills.loader import PromptValue, Skill, builtin_skills, skill_by_name
from tests.runner.kit import (
    FnTool,
    call,
    calls,
    collect,
    echo_tool,
    frames_of,
    request,
    result_of,
    spec,
)


def named(name: str) -> FnTool:
    async def work(args: dict[str, JsonValue]) -> JsonValue:
        return {"tool": name}

    return FnTool(spec(name), work)


def test_for_skill_keeps_only_the_allowlisted_tools() -> None:
    tools = [named(name) for name in ("read_file", "search", "git_push", "write_file")]
    agent = ToolLoopAgent.for_skill("summarize", ScriptedClient([]), tools)

    assert [s.name for s in agent.tools] == ["read_file"]
    assert agent.name == "summarize"
    metadata = agent.metadata()
    assert metadata.description == skill_by_name("summarize").description
    assert "skill:summarize" in metadata.tags


def test_for_skill_passes_options_on() -> None:
    agent = ToolLoopAgent.for_skill(
        "author", ScriptedClient([]), [], name="docs-author", description="Writes docs."
    )

    assert (agent.name, agent.metadata().description) == ("docs-author", "Writes docs.")


def test_an_unknown_skill_is_bem_110_not_all_tools() -> None:
    with pytest.raises(BeamError) as caught:
        ToolLoopAgent.for_skill("authr", ScriptedClient([]), [named("read_file")])

    assert caught.value.code == "BEM-110"


TEXT = "Fix the install page, please."


def occurrences(messages: list[Message], specs: list[ToolSpec]) -> int:
    """How often the request text appears anywhere in one request the client sees."""
    return json.dumps(messages).count(TEXT) + sum(
        spec.model_dump_json().count(TEXT) for spec in specs
    )


async def test_the_system_prompt_is_rendered_from_the_skill_and_prompt_values() -> None:
    client = ScriptedClient(["ok"])
    agent = ToolLoopAgent.for_skill(
        "author", client, [], prompt_values={"repository": "acme/handbook", "branch": "fix-1"}
    )
    await frames_of(agent, TEXT)
    messages = client.requests[0][0]

    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == skill_by_name("author").render(
        repository="acme/handbook", branch="fix-1"
    )
    assert messages[1] == {"role": "user", "content": TEXT}


@pytest.mark.parametrize("name", [skill.name for skill in builtin_skills()])
async def test_with_a_skill_the_request_reaches_the_model_exactly_once(name: str) -> None:
    history: list[dict[str, JsonValue]] = [
        {"role": "user", "content": "What is Riverbeam?"},
        {"role": "assistant", "content": "A docs bot."},
    ]
    client = ScriptedClient(["ok"])
    agent = ToolLoopAgent.for_skill(name, client, [], prompt_values={"repository": "acme"})
    await collect(agent.stream(request(TEXT), AgentContext(history=history)))

    ((messages, specs),) = client.requests
    assert occurrences(messages, specs) == 1
    assert messages[0]["role"] == "system"
    assert messages[1:] == [*history, {"role": "user", "content": TEXT}]


async def test_with_a_skill_every_round_carries_the_request_exactly_once() -> None:
    client = ScriptedClient(
        [calls(call("read_file", "c1")), calls(call("read_file", "c2")), "Summarized."]
    )
    agent = ToolLoopAgent.for_skill("summarize", client, [named("read_file")])
    await frames_of(agent, TEXT)

    assert len(client.requests) == 3
    for messages, specs in client.requests:
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assert occurrences(messages, specs) == 1


def test_the_prompt_is_rendered_once_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[dict[str, PromptValue]] = []
    real = Skill.render

    def counting(self: Skill, **values: PromptValue) -> str:
        rendered.append(values)
        return real(self, **values)

    monkeypatch.setattr(Skill, "render", counting)
    agent = ToolLoopAgent.for_skill("author", ScriptedClient([]), [], prompt_values={"base": "v"})
    first = agent.start(request(TEXT), AgentContext())
    second = agent.start(request("Another request."), AgentContext())

    assert rendered == [{"base": "v"}]
    assert first.messages[0] == second.messages[0]


def test_a_misspelt_prompt_value_fails_at_construction() -> None:
    with pytest.raises(BeamError) as caught:
        ToolLoopAgent.for_skill("author", ScriptedClient([]), [], prompt_values={"repo": "x"})

    assert caught.value.code == "BEM-112"


async def test_a_confirm_first_skill_asks_before_every_call() -> None:
    publish = named("publish_docset")
    client = ScriptedClient([calls(call("publish_docset", "c1")), "Published."])
    agent = ToolLoopAgent.for_skill("gfs-publish", client, [publish])
    result = result_of(await frames_of(agent))

    assert result.status is ResultStatus.INTERRUPTED
    assert result.pending is not None and result.pending.tool == "publish_docset"
    assert publish.calls == []


async def test_tools_the_skill_does_not_allow_are_unknown_to_the_model() -> None:
    client = ScriptedClient([calls(call("echo", "c1", text="x")), "ok"])
    agent = ToolLoopAgent.for_skill("summarize", client, [echo_tool()])
    result = result_of(await frames_of(agent))

    assert client.requests[0][1] == []
    assert result.tool_calls[0].error is not None
    assert result.tool_calls[0].error.code == "BEM-089"
