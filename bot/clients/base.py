"""The model boundary: a client turns chat messages and tool specs into a ``Completion``."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bot.core.frames import Usage
from bot.core.tools import ToolSpec

Message = dict[str, Any]
"""One chat message in the OpenAI format (``role``, ``content``, ``tool_calls`` ...)."""


class ToolCall(BaseModel):
    """A tool call as the model sent it. ``arguments`` stays raw JSON text until the loop
    parses it, so a malformed argument string is a failed call the model can fix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    arguments: str = "{}"
    sent_id: str | None = None
    """The id as the model sent it, set only when the loop had to replace an empty or
    reused one (providers reject a reply whose tool results share an id)."""
    note: str | None = None
    """Added by the loop to this call's result for the model (the calls of the reply that
    were not run); never sent as part of the call."""

    @classmethod
    def of(cls, name: str, arguments: dict[str, Any] | None = None, *, id: str = "") -> ToolCall:
        return cls(
            id=id or f"call_{uuid.uuid4().hex[:12]}",
            name=name,
            arguments=json.dumps(arguments or {}),
        )

    def openai_format(self) -> Message:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class Completion(BaseModel):
    """One model turn: answer text, or tool calls to run (possibly with some text).

    ``finish_reason`` is the provider's word for why the turn ended (``stop``,
    ``tool_calls``, ``length``, ``content_filter``, ...; None when it sent none) and
    ``refusal`` the text of a declined request. The tool loop decides from both whether the
    turn may be acted on (see ``bot.runner.endings``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    finish_reason: str | None = None
    refusal: str | None = None

    @classmethod
    def of_text(cls, text: str, **fields: Any) -> Completion:
        return cls(text=text, **fields)

    @classmethod
    def of_calls(cls, *calls: ToolCall, **fields: Any) -> Completion:
        return cls(tool_calls=list(calls), **fields)

    def assistant_message(self) -> Message:
        """The turn as the assistant message that goes into the history."""
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.openai_format() for call in self.tool_calls]
        return message


class TextDelta(BaseModel):
    """A piece of answer text from a streaming completion."""

    model_config = ConfigDict(frozen=True)

    text: str


@runtime_checkable
class CompletionClient(Protocol):
    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Completion: ...


@runtime_checkable
class StreamingCompletionClient(CompletionClient, Protocol):
    """A client that can also yield text deltas; the last item it yields is the Completion."""

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[TextDelta | Completion]: ...
