"""Model clients: the boundary between the tool loop and a language model.

``OpenAiCompatible`` is loaded on first use: it brings the ``openai`` package (over a second
of imports), which a process that only reads a stream (``bot.clients.sse``) never needs.
"""

from typing import TYPE_CHECKING, Any

from bot.clients.base import (
    Completion,
    CompletionClient,
    Message,
    StreamingCompletionClient,
    TextDelta,
    ToolCall,
)
from bot.clients.echo import EchoClient
from bot.clients.scripted import ScriptedClient

if TYPE_CHECKING:
    from bot.clients.openai_compatible import OpenAiCompatible

__all__ = [
    "Completion",
    "CompletionClient",
    "EchoClient",
    "Message",
    "OpenAiCompatible",
    "ScriptedClient",
    "StreamingCompletionClient",
    "TextDelta",
    "ToolCall",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAiCompatible":
        from bot.clients.openai_compatible import OpenAiCompatible

        return OpenAiCompatible
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
