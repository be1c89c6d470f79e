"""A model's reply nested past every JSON parser, or over the size limit, is a malformed
reply (BEM-063), not a RecursionError out of the client."""

from __future__ import annotations

import pytest

from bot.clients import OpenAiCompatible
from bot.core import jsonlimits
from bot.core.errors import ModelError
from harness.stub_model import Reply, Stream, StubModel, completion
from tests.clients.helpers import MESSAGES, Sleeps, collect

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    "reply",
    [
        Reply(f'{{"choices": {DEEP}}}'),
        Reply(f'{{"choices": [{{"message": {{"content": "hi", "x": {"[" * 40 + "]" * 40}}}}}]}}'),
        completion("x" * (jsonlimits.MAX_BYTES + 1)),
    ],
    ids=["past-python", "past-the-limit", "too-large"],
)
async def test_a_reply_over_the_json_limits_is_bem_063_without_retry(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps, reply: Reply
) -> None:
    stub_model.enqueue(reply)

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-063"
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_a_stream_event_nested_past_every_parser_is_bem_063(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(Stream([f"data: {DEEP}\n\n"]))

    with pytest.raises(ModelError) as caught:
        await collect(client.stream(MESSAGES, []))

    assert caught.value.code == "BEM-063"
