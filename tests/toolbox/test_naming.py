"""How skills name MCP tools (``server.tool``), how the model sees them (``server__tool``),
and how a person sees an MCP call waiting for approval."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from bot.cli.render import approval_fields
from bot.clients.scripted import ScriptedClient
from bot.config import McpSettings
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, allowlist_name, mcp_call, mcp_tool_name
from bot.jobs.toolbox import servers_for
from bot.runner.loop import ToolLoopAgent
from bot.store.models import Approval
from bot.web.rendering import templates
from skills.loader import load_skill, skill_by_name

SERVERS = {
    "servers": [
        {"name": "everything", "command": "node", "tools": ["echo", "get-sum"]},
        {"name": "web_search", "command": "x", "tools": ["search"]},
    ]
}


def skill_text(*tools: str) -> str:
    listed = ", ".join(f'"{tool}"' for tool in tools)
    return f'+++\nname = "mcp-user"\ndescription = "d"\ntools = [{listed}]\n+++\nPrompt.\n'


class Named:
    def __init__(self, name: str) -> None:
        self._spec = ToolSpec(name=name, description=name)

    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        return None


def test_the_model_facing_name_is_one_function_name_and_splits_back() -> None:
    assert mcp_tool_name("web_search", "search") == "web_search__search"
    assert mcp_call("web_search__search") == ("web_search", "search")
    assert mcp_call("everything__a__b") == ("everything", "a__b")
    assert allowlist_name("everything__get-sum") == "everything.get-sum"
    assert allowlist_name("git_push") == "git_push" and mcp_call("git_push") is None


def test_a_skill_allowlist_names_mcp_tools_as_server_dot_tool() -> None:
    skill = load_skill(skill_text("read_file", "everything.echo", "web_search.search"))
    assert skill.tools == {"read_file", "everything.echo", "web_search.search"}
    for bad in ("a.b.c", "Upper.tool", "a__b.tool", "server_.tool", ".tool", "server."):
        with pytest.raises(BeamError) as raised:
            load_skill(skill_text(bad))
        assert raised.value.code == "BEM-111", bad


def test_servers_for_resolves_the_allowlist_and_the_grants_by_server() -> None:
    settings = McpSettings.model_validate(
        SERVERS | {"skills": {"author": ["everything.get-sum", "everything.echo"]}}
    )
    assert servers_for(settings, skill_by_name("author")) == {"everything": ("echo", "get-sum")}
    assert servers_for(settings, skill_by_name("review")) == {}
    own = load_skill(skill_text("web_search.search"))
    assert servers_for(settings, own) == {"web_search": ("search",)}


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("ghost.search", "not configured"),
        ("web_search.fetch", "not in the tools allowlist"),
    ],
)
def test_a_skill_naming_an_unknown_mcp_tool_fails_the_job_at_start(entry: str, says: str) -> None:
    settings = McpSettings.model_validate(SERVERS)
    with pytest.raises(BeamError) as raised:
        servers_for(settings, load_skill(skill_text(entry)))
    assert raised.value.code == "BEM-725" and says in raised.value.message


def test_a_grant_to_no_skill_fails_the_job_at_start() -> None:
    settings = McpSettings.model_validate(SERVERS | {"skills": {"autor": ["everything.echo"]}})
    with pytest.raises(BeamError) as raised:
        servers_for(settings, skill_by_name("author"))
    assert raised.value.code == "BEM-725" and "autor" in raised.value.message


def test_an_agent_offers_an_mcp_tool_only_when_its_skill_names_or_is_granted_it() -> None:
    tools = [Named("read_file"), Named("everything__echo"), Named("everything__get-sum")]
    plain = ToolLoopAgent.for_skill("author", ScriptedClient([]), tools)
    granted = ToolLoopAgent.for_skill(
        "author", ScriptedClient([]), tools, granted=["everything.echo"]
    )
    assert [spec.name for spec in plain.tools] == ["read_file"]
    assert [spec.name for spec in granted.tools] == ["everything__echo", "read_file"]


def mcp_approval() -> Approval:
    return Approval(
        id="a1",
        job_id="j1",
        repo="docs",
        requested_by="writer@example.com",
        call_id="c1",
        tool="everything__get-sum",
        arguments={"a": 2, "b": 3},
    )


def test_a_person_sees_the_server_the_tool_and_the_arguments_of_an_mcp_call() -> None:
    macro = templates.env.get_template("_parts.html").module.approval_facts  # type: ignore[attr-defined]
    page = str(macro(mcp_approval()))
    assert "tool <code>get-sum</code> of the MCP server <code>everything</code>" in page
    assert '"a": 2' in page and '"b": 3' in page
    shown = approval_fields(mcp_approval()).plain
    assert 'everything.get-sum {"a": 2, "b": 3}' in shown
