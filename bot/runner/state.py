"""Everything a run needs to continue later, in another process: ``RunState`` and ``CallDecision``.

A run that reaches a ``confirm_required`` tool parks: the loop stops, the state is saved as
JSON, and a person decides. Any worker can then load the state and resume it with a fresh
agent, so the state must hold the whole conversation and every counter, and it must say which
agent and which tools it belongs to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.clients.base import Message, ToolCall
from bot.core.errors import BeamError
from bot.core.frames import AgentResult, ErrorInfo, PendingCall, ResultStatus, ToolCallRecord, Usage
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec
from bot.runner.budget import DEFAULT_CHARS_PER_TOKEN, Compaction, ContextBudget

STATE_VERSION: Final = 1
"""Bump when a field changes meaning; ``RunState.load`` refuses every other version."""


class CallDecision(BaseModel):
    """A person's answer to the pending call of a parked run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str
    approved: bool
    comment: str = ""
    decided_by: str = ""


class RunState(BaseModel):
    """The durable document of one run: conversation, counters, records and where it stopped.

    ``status`` is ``None`` while the run is in progress. ``queue`` holds the tool calls of the
    latest completion that have not been processed yet; when the run parks, ``pending`` is the
    call that waits and ``queue`` the calls after it.
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = STATE_VERSION
    agent: str
    skill: str | None = None
    tools: list[str]
    tools_digest: str
    input: AgentInput
    messages: list[Message]
    queue: list[ToolCall] = Field(default_factory=list)
    pending: PendingCall | None = None
    rounds: int = 0
    # Requests sent to the model over the whole run (``rounds`` is per segment); a state saved
    # before run limits counts from its resume.
    requests: int = 0
    failures: dict[str, int] = Field(default_factory=dict)
    records: list[ToolCallRecord] = Field(default_factory=list)
    decisions: list[CallDecision] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_used: str | None = None
    status: ResultStatus | None = None
    text: str = ""
    error: ErrorInfo | None = None
    refusal: str | None = None
    # The context budget the run started with, its calibration and what it compacted: a
    # resumed run must send what the parked one would have. A state saved before budgets
    # existed has none, and runs on without one, as it would have.
    budget: ContextBudget | None = None
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    compacted: list[Compaction] = Field(default_factory=list)

    @classmethod
    def load(cls, data: str | bytes) -> RunState:
        """Read a state saved with ``model_dump_json``; BEM-091 for another version."""
        try:
            raw = json.loads(data)
        except ValueError as error:
            raise BeamError("BEM-097", f"saved run state is not JSON: {error}") from error
        if not isinstance(raw, dict):
            raise BeamError("BEM-097", "saved run state must be a JSON object")
        # The version is checked before validation so an old or newer document gets the code
        # that says "wrong version", not a list of field errors.
        version = raw.get("version")
        if version != STATE_VERSION:
            raise BeamError(
                "BEM-091",
                f"saved run state has version {version!r}; this Riverbeam reads version "
                f"{STATE_VERSION} only. Resume it with the release that saved it.",
            )
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            raise BeamError("BEM-097", f"saved run state is malformed: {error}") from error

    def fail(self, error: BeamError) -> None:
        """End the run as failed. A failed run cannot be resumed, so nothing stays pending.

        The first failure keeps its code; a later one (a stop hook failing after the run
        failed) is appended to the message so neither is lost.
        """
        if self.status is ResultStatus.FAILED and self.error is not None:
            message = f"{self.error.message} (then {error})"
            self.error = ErrorInfo(code=self.error.code, message=message)
        else:
            self.error = ErrorInfo(code=error.code, message=error.message)
        self.status = ResultStatus.FAILED
        self.pending = None

    def result(self) -> AgentResult:
        """The run as the ``AgentResult`` a done frame carries."""
        if self.status is None:
            raise ValueError("the run has not ended yet; it has no result")
        return AgentResult(
            status=self.status,
            text=self.text,
            tool_calls=list(self.records),
            usage=self.usage,
            model_used=self.model_used,
            pending=self.pending,
            error=self.error,
            refusal=self.refusal,
        )


def accepted_digests(
    specs: Iterable[ToolSpec], earlier: Mapping[str, Sequence[ToolSpec]]
) -> frozenset[str]:
    """The digest of ``specs``, and the digests of the same tools with each earlier
    version in ``earlier`` put back, so a run parked before a compatible change resumes."""
    current = {spec.name: spec for spec in specs}
    digests = {specs_digest(current.values())}
    depth = max((len(versions) for versions in earlier.values()), default=0)
    for back in range(depth):
        older = dict(current)
        for name, versions in earlier.items():
            if name in older and back < len(versions):
                older[name] = versions[back]
        digests.add(specs_digest(older.values()))
    return frozenset(digests)


def specs_digest(specs: Iterable[ToolSpec]) -> str:
    """A digest of the tool specs, so a resumed run refuses tools whose contract changed."""
    documents = sorted((spec.model_dump(mode="json") for spec in specs), key=_by_name)
    canonical = json.dumps(documents, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _by_name(document: dict[str, Any]) -> str:
    return str(document["name"])
