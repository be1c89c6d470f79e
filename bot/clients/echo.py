"""A client that answers with the last user message: no network, no key."""

from __future__ import annotations

from collections.abc import Sequence

from bot.clients.base import Completion, Message
from bot.core.tools import ToolSpec


class EchoClient:
    model = "echo"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        last_user = next(
            (m.get("content") for m in reversed(messages) if m.get("role") == "user"), ""
        )
        return Completion(text=str(last_user or ""), model=self.model)
