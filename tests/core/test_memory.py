from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis import Redis

from bot.agents.memory import MAX_NOTE_CHARS, InMemoryStore, MemoryStore, RememberTool
from bot.agents.redis_memory import RedisMemoryStore
from bot.core.errors import ToolError
from bot.core.input import AgentInput
from bot.core.tools import validate_arguments
from bot.store.keys import Keys
from harness.redis_server import redis_server


@pytest.fixture(params=["in-memory", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    if request.param == "in-memory":
        yield InMemoryStore(keep=3)
        return
    with redis_server(tmp_path) as url:
        client = Redis.from_url(url)
        try:
            yield RedisMemoryStore(client, key=Keys("riverbeam").memory, keep=3)
        finally:
            client.close()


async def test_recall_returns_the_newest_notes_oldest_first(store: MemoryStore) -> None:
    for index in range(5):
        await store.remember("docs", f"rule {index}")
    assert [n.text for n in await store.recall("docs")] == ["rule 2", "rule 3", "rule 4"]
    assert [n.text for n in await store.recall("docs", limit=2)] == ["rule 3", "rule 4"]
    assert await store.recall("docs", limit=0) == []
    assert await store.recall("elsewhere") == []


@pytest.mark.parametrize("text", ["", "   ", "x" * (MAX_NOTE_CHARS + 1)])
async def test_empty_or_long_notes_are_refused(store: MemoryStore, text: str) -> None:
    with pytest.raises(ToolError) as caught:
        await store.remember("docs", text)
    assert caught.value.code == "BEM-102"
    assert await store.recall("docs") == []


async def test_the_remember_tool_stores_a_note_for_its_scope(store: MemoryStore) -> None:
    tool = RememberTool(store, "docs")
    args = validate_arguments(tool.spec(), {"note": "Say 'sign in', not 'login'."})
    assert await tool.invoke(args, AgentInput.of_text("x")) == {
        "remembered": "Say 'sign in', not 'login'.",
        "scope": "docs",
    }
    assert [n.text for n in await store.recall("docs")] == ["Say 'sign in', not 'login'."]
