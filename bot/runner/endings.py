"""How a model turn ended, and whether the loop may act on it.

A provider says why a turn ended in ``finish_reason``. Only a turn that ended on its own
(``stop``, ``tool_calls``, ...) is acted on: a turn cut at the output-token limit or stopped
by a content filter may hold half an answer or a tool call cut mid-arguments, so the run
ends with a code that says what to change, and nothing in that turn is run. A reason this
module does not know ends the run too: acting on a turn of unknown standing is how a
truncated call would slip through.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from bot.clients.base import Completion, Message, ToolCall
from bot.core.errors import BeamError

# Providers spell a natural end several ways: OpenAI and vLLM "stop"/"tool_calls" (and the
# legacy "function_call"), llama.cpp "eos", LiteLLM passes Anthropic's "end_turn" and
# "stop_sequence" through.
NATURAL_ENDS: Final = frozenset(
    {"stop", "tool_calls", "function_call", "eos", "end_turn", "stop_sequence"}
)
LENGTH_ENDS: Final = frozenset({"length", "max_tokens", "model_length"})
FILTERED_ENDS: Final = frozenset({"content_filter"})

OUTPUT_LIMIT_SETTING: Final = "model.max_output_tokens (RIVERBEAM_MODEL__MAX_OUTPUT_TOKENS)"


def check_ending(completion: Completion, output_limit: str | None = None) -> None:
    """Raise when the turn must not be acted on: BEM-066 for a content filter, BEM-067 for
    the output-token limit, BEM-068 for a reason nobody here knows, BEM-071 for a reply of
    nothing.

    ``output_limit`` names the limit in force (``max_completion_tokens=4096``), for the
    message.
    """
    reason = (completion.finish_reason or "").strip().lower()
    if not reason or reason in NATURAL_ENDS:
        _check_not_empty(completion, reason)
        return
    calls = _unrun(completion.tool_calls)
    if reason in LENGTH_ENDS:
        limit = f" ({output_limit})" if output_limit else ""
        generated = completion.usage.completion_tokens if completion.usage else 0
        after = f" after {generated} tokens" if generated else ""
        raise BeamError(
            "BEM-067",
            f"the model's reply was cut off at its output-token limit{limit}{after}{calls};"
            f" raise the limit with {OUTPUT_LIMIT_SETTING}, or ask for less in one request",
        )
    if reason in FILTERED_ENDS:
        raise BeamError(
            "BEM-066",
            f"the provider's content filter stopped the model's reply{calls}; reword the"
            " request or the pages it reads, or ask the provider about its filter settings",
        )
    raise BeamError(
        "BEM-068",
        f"the model ended its reply with finish_reason {reason[:80]!r}, which Riverbeam does"
        f" not know{calls}; the reply may be incomplete, so it was not acted on",
    )


def _check_not_empty(completion: Completion, reason: str) -> None:
    """An answer of nothing is no answer (fail closed): BEM-071, streamed or not, whatever
    the finish reason says (``stop`` with null content, ``tool_calls`` with no calls, a
    stream that sent no choice at all)."""
    if completion.tool_calls or (completion.text or "").strip():
        return
    said = f"finish_reason {reason[:80]!r}" if reason else "no finish_reason"
    raise BeamError(
        "BEM-071",
        f"the model replied with nothing: no text and no tool calls ({said}); the run is not"
        " taken as answered. Run the job again; if it keeps happening, check the model and"
        " its server (a chat template that drops the reply, a proxy that strips it)",
    )


def _unrun(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return ""
    names = ", ".join(sorted({call.name for call in calls}))
    return f"; its {len(calls)} tool call(s) ({names}) were not run"


def unique_call_ids(calls: Sequence[ToolCall], history: Iterable[Message]) -> list[ToolCall]:
    """The calls with every id non-empty and unused in the conversation so far.

    Results are matched to calls by id: a provider rejects a request whose tool results
    share an id, or pairs them with the wrong call. A replaced call keeps the model's id in
    ``sent_id`` so its record shows what happened.
    """
    used = set(_ids_in(history))
    unique: list[ToolCall] = []
    for call in calls:
        if call.id and call.id not in used:
            used.add(call.id)
            unique.append(call)
            continue
        stem = call.id or "call"
        number = 2
        while f"{stem}-{number}" in used:
            number += 1
        fresh = f"{stem}-{number}"
        used.add(fresh)
        unique.append(call.model_copy(update={"id": fresh, "sent_id": call.id}))
    return unique


def _ids_in(history: Iterable[Message]) -> Iterable[str]:
    for message in history:
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            yield message["tool_call_id"]
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                yield call["id"]
