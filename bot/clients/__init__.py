"""Model clients: the boundary between the tool loop and a language model."""

from bot.clients.base import (
    Completion,
    CompletionClient,
    Message,
    StreamingCompletionClient,
    TextDelta,
    ToolCall,
)
from bot.clients.echo import EchoClient
from bot.clients.openai_compatible import OpenAiCompatible
from bot.clients.scripted import ScriptedClient

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
