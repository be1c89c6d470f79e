"""What an agent produces: frames while it runs and an ``AgentResult`` at the end."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter


class Usage(BaseModel):
    """Token counts as the model endpoint reported them."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    # Parts of the two counts above, when the provider details them (0 when it does not).
    cached_tokens: int = Field(default=0, description="prompt tokens served from its cache")
    reasoning_tokens: int = Field(default=0, description="completion tokens spent reasoning")
    unreported_requests: int = Field(
        default=0,
        description="requests whose usage the endpoint did not report (the counts above miss"
        " them): a provider that sends none, or a stream that broke after its answer",
    )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            unreported_requests=self.unreported_requests + other.unreported_requests,
        )


class ErrorInfo(BaseModel):
    """A BEM code and its message, as data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str


class ToolCallRecord(BaseModel):
    """One tool call the agent made, and how it ended."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: JsonValue
    ok: bool
    result: JsonValue = None
    error: ErrorInfo | None = None
    duration_ms: float = 0.0
    sent_id: str | None = Field(
        default=None,
        description="the id the model sent when it was empty or reused, and so was replaced",
    )


class PendingCall(BaseModel):
    """A tool call that waits for a person's decision before it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    tool: str
    arguments: dict[str, JsonValue]


class ResultStatus(StrEnum):
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    REFUSED = "refused"
    """The model declined the request (its ``refusal``); nothing more was run."""


class AgentResult(BaseModel):
    """How a run ended: its text, the tool calls it made, token usage and the model used."""

    model_config = ConfigDict(extra="forbid")

    status: ResultStatus
    text: str = ""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_used: str | None = None
    pending: PendingCall | None = None
    error: ErrorInfo | None = None
    refusal: str | None = None


class PlaceholderFrame(BaseModel):
    type: Literal["placeholder"] = "placeholder"
    text: str = ""


class ThinkingFrame(BaseModel):
    type: Literal["thinking"] = "thinking"
    text: str = ""


class ToolFrame(BaseModel):
    type: Literal["tool"] = "tool"
    record: ToolCallRecord


class ChunkFrame(BaseModel):
    """Answer text: a whole answer, or one token delta when the model streams."""

    type: Literal["chunk"] = "chunk"
    text: str


class DoneFrame(BaseModel):
    type: Literal["done"] = "done"
    result: AgentResult


class ErrorFrame(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorInfo


Frame = Annotated[
    PlaceholderFrame | ThinkingFrame | ToolFrame | ChunkFrame | DoneFrame | ErrorFrame,
    Field(discriminator="type"),
]

frame_adapter: TypeAdapter[Frame] = TypeAdapter(Frame)
