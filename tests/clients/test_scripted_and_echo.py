"""The two clients that need no network: ScriptedClient and EchoClient."""

from __future__ import annotations

import pytest

from bot.clients import (
    Completion,
    CompletionClient,
    EchoClient,
    Message,
    ScriptedClient,
    ToolCall,
)
from bot.core.errors import BeamError, ModelError
from tests.clients.helpers import MESSAGES, READ_FILE


async def test_scripted_plays_its_steps_in_order() -> None:
    call = ToolCall.of("read_file", {"path": "a.md"}, id="call_1")
    client = ScriptedClient([Completion.of_calls(call), "plain answer"])

    first = await client.complete(MESSAGES, [READ_FILE])
    second = await client.complete(MESSAGES, [])

    assert first == Completion(tool_calls=[call], model="scripted")
    assert second == Completion(text="plain answer", model="scripted")
    assert client.remaining == 0


async def test_scripted_keeps_a_step_s_own_model() -> None:
    client = ScriptedClient([Completion.of_text("hi", model="pretend/model")])

    assert (await client.complete(MESSAGES, [])).model == "pretend/model"


async def test_scripted_raises_an_error_step() -> None:
    client = ScriptedClient([BeamError("BEM-062", "provider down"), "after"])

    with pytest.raises(ModelError, match="provider down"):
        await client.complete(MESSAGES, [])
    assert (await client.complete(MESSAGES, [])).text == "after"


async def test_scripted_fails_with_bem_081_when_out_of_steps() -> None:
    client = ScriptedClient(["only one"])
    await client.complete(MESSAGES, [])

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-081"
    assert "after 1 completions" in caught.value.message
    assert len(client.requests) == 2


async def test_scripted_records_copies_of_each_request() -> None:
    client = ScriptedClient(["a", "b"])
    messages: list[Message] = [{"role": "user", "content": "first"}]

    await client.complete(messages, [READ_FILE])
    messages[0]["content"] = "changed afterwards"
    messages.append({"role": "user", "content": "second"})
    await client.complete(messages, [])

    assert client.requests == [
        ([{"role": "user", "content": "first"}], [READ_FILE]),
        (
            [
                {"role": "user", "content": "changed afterwards"},
                {"role": "user", "content": "second"},
            ],
            [],
        ),
    ]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (MESSAGES, "What changed?"),
        (
            [
                {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "reply"},
                {"role": "user", "content": "latest"},
                {"role": "tool", "content": "result"},
            ],
            "latest",
        ),
        ([{"role": "system", "content": "no user here"}], ""),
        ([{"role": "user", "content": None}], ""),
        ([], ""),
    ],
)
async def test_echo_answers_with_the_last_user_message(
    messages: list[Message], expected: str
) -> None:
    result = await EchoClient().complete(messages, [READ_FILE])

    assert result == Completion(text=expected, model="echo")


def test_both_satisfy_the_client_protocol() -> None:
    assert isinstance(EchoClient(), CompletionClient)
    assert isinstance(ScriptedClient([]), CompletionClient)
