"""The context budget: what the tool loop does so a request never outgrows the model.

Four rules, applied by the loop:

1. A tool result longer than ``max_result_chars`` goes back cut, by its structure where it
   has one (``bot.runner.result_fit``), else as text with a note that says how to get the
   rest (``cap_result``).
2. At most ``max_calls_per_reply`` tool calls of one reply run; the rest are recorded as
   BEM-099 and named in one note on the last run call's result (``over_cap_note``).
3. Before each request the loop estimates its size. Past ``compact_at`` of the input budget
   it compacts older tool results, oldest first, into short placeholders that say what was
   there and how to get it again, keeping the latest ``keep_rounds`` rounds whole, until the
   estimate is back under ``compact_to``. Only if that is not enough are the latest rounds'
   results compacted too.
4. A request that still does not fit is never sent: the run fails with BEM-070.

The estimate is characters divided by characters-per-token, calibrated after each reply
from the prompt tokens the provider reports, within bounds that keep a provider's odd usage
report from loosening the budget. Everything it depends on (the budget, the calibration,
which results were compacted) lives in the ``RunState``, so a resumed run sends exactly what
the parked run would have.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from bot.clients.base import Message, ToolCall
from bot.clients.profiles import DEFAULT_MAX_OUTPUT_TOKENS, PROFILES
from bot.core.errors import BeamError

DEFAULT_CONTEXT_WINDOW: Final = min(profile.context_window for profile in PROFILES.values())
"""The window of an agent whose client does not say its own: the smallest of the providers'
profiles, so a default never lets a request outgrow a model."""
NO_BUDGET: Final = "off"
"""``ToolLoopAgent(budget=NO_BUDGET)``: no budget at all, asked for explicitly (the
workers' ``model.context_budget = false``)."""
DEFAULT_CHARS_PER_TOKEN: Final = 3.0
"""Before the first usage report: JSON and code run about 3 characters a token, prose 4."""
_CALIBRATION_BOUNDS: Final = (1.0, 4.0)
_NOTE_ARGUMENT_CHARS: Final = 200
_LISTED_CALLS: Final = 10
_LISTED_ARGUMENT_CHARS: Final = 60


class ContextBudget(BaseModel):
    """The limits of one run; saved in its ``RunState``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_window: int = Field(ge=1024, description="tokens: input and output of a request")
    max_output_tokens: int = Field(ge=1, description="kept free for the reply")
    max_result_chars: int = Field(default=24_000, ge=500)
    max_calls_per_reply: int = Field(default=16, ge=1)
    compaction: bool = True
    keep_rounds: int = Field(default=1, ge=0, description="latest rounds never compacted first")
    compact_at: float = Field(default=0.75, gt=0, le=1)
    compact_to: float = Field(default=0.5, gt=0, le=1)

    @property
    def input_tokens(self) -> int:
        """Tokens a request may carry, the reply's share kept aside."""
        return max(self.context_window - self.max_output_tokens, 256)

    @classmethod
    def for_client(cls, client: object) -> ContextBudget:
        """The default budget of an agent on ``client``: its ``context_window`` and
        ``max_tokens`` when it has them, else ``DEFAULT_CONTEXT_WINDOW`` and
        ``DEFAULT_MAX_OUTPUT_TOKENS``; the other limits at their defaults."""
        window = getattr(client, "context_window", None)
        output = getattr(client, "max_tokens", None)
        window = window if isinstance(window, int) and window >= 1024 else DEFAULT_CONTEXT_WINDOW
        output = output if isinstance(output, int) and output >= 1 else DEFAULT_MAX_OUTPUT_TOKENS
        return cls(context_window=window, max_output_tokens=min(output, window // 2))


def recalibrated(sent_chars: int, budget: ContextBudget, chars_per_token: float) -> float:
    """Characters per token after the model refused a request of ``sent_chars`` as over its
    window: at most what would have put that request exactly at the limit, less a tenth."""
    refused_at = sent_chars / max(budget.input_tokens, 1)
    return max(0.5, min(chars_per_token, refused_at * 0.9))


class Compaction(BaseModel):
    """One tool result replaced by a placeholder, as the run state records it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_call_id: str
    tool: str
    chars: int


def chars_of(messages: Sequence[Message]) -> int:
    return sum(len(json.dumps(message)) for message in messages)


def estimate_tokens(chars: int, chars_per_token: float) -> int:
    return int(chars / chars_per_token) + 1


def calibrated(sent_chars: int, prompt_tokens: int) -> float | None:
    """Characters per token of a request whose prompt tokens the provider reported."""
    if sent_chars <= 0 or prompt_tokens <= 0:
        return None
    low, high = _CALIBRATION_BOUNDS
    return min(high, max(low, sent_chars / prompt_tokens))


def cap_result(content: str, tool: str, limit: int) -> str:
    """``content`` whole, or its first characters and a note on how to get the rest."""
    if len(content) <= limit:
        return content
    how = (
        "call read_file again with start_line and limit to read the lines you need"
        if tool == "read_file"
        else f"call {tool} again with narrower arguments"
    )
    note = f"\n[cut: the result is {len(content)} characters, the first {limit} are shown; {how}]"
    return content[:limit] + note


def over_cap_message(limit: int) -> str:
    return (
        f"not run: at most {limit} tool calls of one reply are run (model.max_calls_per_reply);"
        " ask for this call again in your next reply"
    )


def over_cap_note(limit: int, declined: Sequence[ToolCall]) -> str:
    """What the model reads, once, about the calls of its reply that did not run."""
    listed = ", ".join(
        f"{call.name}({_shortened(call.arguments, _LISTED_ARGUMENT_CHARS)})"
        for call in declined[:_LISTED_CALLS]
    )
    more = f" and {len(declined) - _LISTED_CALLS} more" if len(declined) > _LISTED_CALLS else ""
    return (
        f"[{len(declined)} more tool calls of your reply were not run: at most {limit} run per"
        f" reply (model.max_calls_per_reply). Ask again for those you need: {listed}{more}]"
    )


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def fit(
    messages: list[Message],
    budget: ContextBudget,
    *,
    chars_per_token: float,
    fixed_chars: int,
    compacted: list[Compaction],
) -> int:
    """Compact ``messages`` in place until the request fits, and return its characters;
    BEM-070 when it cannot fit.

    ``fixed_chars`` is what every request carries besides the messages (the tool specs).
    Each compaction is appended to ``compacted``.
    """
    limit = budget.input_tokens
    # Each message is measured once; a compaction changes the total by its own difference.
    sizes = [len(json.dumps(message)) for message in messages]
    total = fixed_chars + sum(sizes)

    def tokens() -> int:
        return estimate_tokens(total, chars_per_token)

    if tokens() <= limit * budget.compact_at:
        return total
    if budget.compaction:
        done = {item.tool_call_id for item in compacted}
        older, latest = _candidates(messages, budget.keep_rounds, done)
        target = limit * budget.compact_to
        for group in (older, latest):
            for index in group:
                if tokens() <= target:
                    break
                if _compact(messages, index, compacted):
                    smaller = len(json.dumps(messages[index]))
                    total -= sizes[index] - smaller
                    sizes[index] = smaller
            target = limit
    estimate = tokens()
    if estimate > limit:
        raise BeamError(
            "BEM-070",
            f"the next request (about {estimate} tokens) does not fit the context budget of"
            f" {limit} tokens (model.context_window {budget.context_window} less"
            f" {budget.max_output_tokens} for the reply)"
            + (" even with every tool result compacted" if budget.compaction else "")
            + "; raise model.context_window if the model allows, or narrow the request",
        )
    return total


def _candidates(
    messages: Sequence[Message], keep_rounds: int, done: set[str]
) -> tuple[list[int], list[int]]:
    """Indexes of tool results not compacted yet (``done`` holds the call ids that are)
    outside the latest ``keep_rounds`` rounds, and inside them, oldest first. A round starts
    at an assistant message that calls tools."""
    starts = [
        index
        for index, message in enumerate(messages)
        if message.get("role") == "assistant" and message.get("tool_calls")
    ]
    boundary = starts[-keep_rounds] if keep_rounds and len(starts) >= keep_rounds else 0
    if not keep_rounds:
        boundary = len(messages)
    results = [
        index
        for index, message in enumerate(messages)
        if message.get("role") == "tool" and message.get("tool_call_id") not in done
    ]
    return [i for i in results if i < boundary], [i for i in results if i >= boundary]


def _compact(messages: list[Message], index: int, compacted: list[Compaction]) -> bool:
    message = messages[index]
    call_id = str(message.get("tool_call_id", ""))
    content = str(message.get("content", ""))
    tool, arguments = _call_of(messages, index, call_id)
    placeholder = json.dumps(
        {
            "compacted": (
                f"the result of {tool} ({len(content)} characters) was removed to keep the"
                f" conversation within the context budget; call {tool} again with"
                f" {arguments} if you need it"
            )
        }
    )
    if len(placeholder) >= len(content):
        return False
    messages[index] = {**message, "content": placeholder}
    compacted.append(Compaction(tool_call_id=call_id, tool=tool, chars=len(content)))
    return True


def _call_of(messages: Sequence[Message], index: int, call_id: str) -> tuple[str, str]:
    """The tool name and (shortened) arguments of the call a result answers."""
    for message in reversed(messages[:index]):
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and call.get("id") == call_id:
                function: dict[str, Any] = call.get("function") or {}
                arguments = _shortened(str(function.get("arguments", "{}")), _NOTE_ARGUMENT_CHARS)
                return str(function.get("name", "the tool")), arguments
    return "the tool", "the same arguments"
