"""``PlaybookClient``: a scripted model that can stop in one process and go on in another.

``ScriptedClient`` plays its steps in the order it is asked, so a fresh one always starts at
step 0. A job that parks in one worker and resumes in another gets a fresh client, and must
continue where the conversation is. ``PlaybookClient`` therefore picks its step by how many
assistant messages the conversation already holds: step ``n`` answers the request that comes
after ``n`` model turns, whichever process makes it.

A step is a ``Completion``, a plain answer string, or a function of the messages that returns
either: a step that reacts to a tool result (the text of a file it read, a refusal) reads it
from the messages.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence

from pydantic import JsonValue

from bot.clients.base import Completion, Message
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec

PlaybookStep = Completion | str | Callable[[Sequence[Message]], Completion | str]


class PlaybookClient:
    """Answers request ``n`` (counted by assistant turns so far) with step ``n``; BEM-081 past
    the last step. ``requests`` records what this instance was asked."""

    model = "playbook"

    def __init__(self, steps: Iterable[PlaybookStep]) -> None:
        self._steps = list(steps)
        self.requests: list[list[Message]] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.requests.append(copy.deepcopy(list(messages)))
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        if turn >= len(self._steps):
            raise BeamError(
                "BEM-081",
                f"the playbook has {len(self._steps)} steps and the conversation already has "
                f"{turn} model turns; add a step for this request",
            )
        step = self._steps[turn]
        answer = step(messages) if callable(step) else step
        if isinstance(answer, str):
            return Completion(text=answer, model=self.model)
        return answer if answer.model else answer.model_copy(update={"model": self.model})


def tool_results(
    messages: Sequence[Message], tool: str | None = None
) -> list[tuple[JsonValue, JsonValue]]:
    """(arguments, result) of every answered tool call (of ``tool``, if named), oldest first,
    each parsed from its JSON text (text that is not JSON stays text): what a step reads.
    Tool messages carry a result or ``{"error": {...}}``."""
    functions = {
        call["id"]: call["function"]
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    found = []
    for message in messages:
        function = functions.get(message.get("tool_call_id"), {})
        if message.get("role") == "tool" and tool in (None, function.get("name")):
            arguments = _parsed(str(function.get("arguments") or "{}"))
            found.append((arguments, _parsed(str(message.get("content") or "null"))))
    return found


def last_tool_result(messages: Sequence[Message], tool: str | None = None) -> JsonValue:
    """The newest tool message's content (of a call of ``tool``, if named), parsed; ``None``
    when there is none: what a step reacts to."""
    found = tool_results(messages, tool)
    return found[-1][1] if found else None


def _parsed(text: str) -> JsonValue:
    try:
        parsed: JsonValue = json.loads(text)
    except ValueError:
        return text
    return parsed
