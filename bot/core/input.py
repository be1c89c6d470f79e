"""What an agent receives: the request content and the context it runs in."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator


class Modality(StrEnum):
    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    FILE = "file"


class ContentPart(BaseModel):
    """One piece of request content. Text parts carry ``text``; others a URI or base64 data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    modality: Modality = Modality.TEXT
    text: str | None = None
    uri: str | None = None
    data: str | None = Field(default=None, description="base64-encoded bytes")
    mime_type: str | None = None

    @model_validator(mode="after")
    def _has_payload(self) -> ContentPart:
        if self.modality is Modality.TEXT and self.text is None:
            raise ValueError("a text part needs 'text'")
        if self.modality is not Modality.TEXT and self.uri is None and self.data is None:
            raise ValueError(f"a {self.modality.value} part needs 'uri' or 'data'")
        return self

    @classmethod
    def of_text(cls, text: str) -> ContentPart:
        return cls(modality=Modality.TEXT, text=text)


class AgentInput(BaseModel):
    """The request an agent answers."""

    model_config = ConfigDict(extra="forbid")

    content: list[ContentPart]
    session_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    auth_context: dict[str, JsonValue] = Field(default_factory=dict)
    actions: list[str] = Field(default_factory=list)

    @classmethod
    def of_text(cls, text: str, **fields: Any) -> AgentInput:
        return cls(content=[ContentPart.of_text(text)], **fields)

    def text(self) -> str:
        """The text parts joined by blank lines: what a text-only model reads."""
        return "\n\n".join(part.text for part in self.content if part.text is not None)

    def modalities(self) -> set[Modality]:
        return {part.modality for part in self.content}


class ModelConfig(BaseModel):
    """The model the host resolved for a request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "builtin"
    text_only: bool = True


class AgentContext(BaseModel):
    """Everything around the request: prior conversation, resolved model, request metadata.

    ``history`` holds earlier turns only, in the OpenAI chat format; the current request is
    ``AgentInput.content`` and is never repeated here.
    """

    model_config = ConfigDict(extra="forbid")

    history: list[dict[str, JsonValue]] = Field(default_factory=list)
    model_config_resolved: ModelConfig = Field(default_factory=ModelConfig)
    request_metadata: dict[str, JsonValue] = Field(default_factory=dict)
