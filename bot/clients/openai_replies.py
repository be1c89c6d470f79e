"""Reading an OpenAI-compatible chat-completions reply into a ``Completion``: a whole JSON
reply (``parse_completion``) or a server-sent event stream folded chunk by chunk
(``read_event_stream``).

A reply that is not a chat completion is BEM-063 (``malformed_reply``): the same request
would get the same reply. A stream that ends before its last chunk is a ``RetryableFailure``;
one that breaks after a choice's ``finish_reason`` keeps its answer, with no usage.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.clients.base import Completion, TextDelta, ToolCall
from bot.clients.retry import RETRYABLE_TRANSPORT_ERRORS, RetryableFailure
from bot.clients.sse import aiter_events
from bot.core import jsonlimits
from bot.core.errors import BeamError
from bot.core.frames import Usage


class Quote(Protocol):
    """Makes provider text safe to put in a message (``OpenAiCompatible._quote``)."""

    def __call__(self, text: str, limit: int = ...) -> str: ...


# -- reply parsing -------------------------------------------------------------------------


def malformed_reply(problem: str) -> BeamError:
    return BeamError("BEM-063", f"the model reply is malformed: {problem}")


def parse_completion(payload: Any, fallback_model: str, quote: Quote) -> Completion:
    if not isinstance(payload, dict):
        raise malformed_reply(f"the reply is a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list):
        said = _error_text(payload)
        says = f"; it says: {quote(said)}" if said else ""
        raise malformed_reply(f"the reply has no 'choices' list{says}")
    if not choices:
        raise malformed_reply("'choices' is empty")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise malformed_reply("choices[0] has no 'message' object")
    return Completion(
        text=_content(message.get("content"), "choices[0].message.content"),
        tool_calls=_tool_calls(message.get("tool_calls")),
        usage=_usage(payload.get("usage")),
        model=_model(payload, fallback_model),
        finish_reason=_finish_reason(choice.get("finish_reason")),
        refusal=_content(message.get("refusal"), "choices[0].message.refusal") or None,
    )


def _finish_reason(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise malformed_reply(f"'finish_reason' is a JSON {type(value).__name__}, not a string")


def _content(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise malformed_reply(f"{where} is a JSON {type(value).__name__}, not a string")


def _tool_calls(raw: Any) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise malformed_reply("'tool_calls' is not a list")
    calls = []
    for number, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            raise malformed_reply(f"tool call {number} has no 'function' object")
        name, arguments = function.get("name"), function.get("arguments")
        calls.append(_tool_call(number, item.get("id"), name, arguments))
    return calls


def _tool_call(number: int, call_id: Any, name: Any, arguments: Any) -> ToolCall:
    if not isinstance(name, str) or not name:
        raise malformed_reply(f"tool call {number} has no function name")
    # A missing id stays empty: the tool loop gives it a unique one and records that it did.
    call_id = call_id if isinstance(call_id, str) else ""
    return ToolCall(id=call_id, name=name, arguments=_arguments_text(arguments))


def _arguments_text(arguments: Any) -> str:
    """Arguments stay the model's own text, so the tool loop can report bad JSON back to it.
    A provider that sends an object gets it serialised; no arguments at all means ``{}``."""
    if isinstance(arguments, str):
        return arguments if arguments.strip() else "{}"
    return "{}" if arguments is None else json.dumps(arguments)


def _usage(raw: Any) -> Usage | None:
    """Usage is a report, not the answer: an odd one is dropped rather than failing the turn."""
    if not isinstance(raw, dict):
        return None
    prompt, completion, total = (
        _count(raw.get(key)) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
    if prompt is None and completion is None and total is None:
        return None
    prompt, completion = prompt or 0, completion or 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion if total is None else total,
        cached_tokens=_detail(raw, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=_detail(raw, "completion_tokens_details", "reasoning_tokens"),
    )


def _detail(raw: dict[str, Any], block: str, key: str) -> int:
    details = raw.get(block)
    return (_count(details.get(key)) or 0) if isinstance(details, dict) else 0


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _model(payload: dict[str, Any], fallback: str) -> str:
    model = payload.get("model")
    return model if isinstance(model, str) and model else fallback


def _error_text(payload: Any) -> str | None:
    """The message of an error document ({"error": {"message": ...}}, {"detail": ...})."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    for candidate in (error, payload.get("message"), payload.get("detail")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


def provider_message(body: str) -> str | None:
    try:
        return _error_text(jsonlimits.loads(body, what="the error body"))
    except ValueError:
        return None


# -- streaming -----------------------------------------------------------------------------


@dataclass
class _PartialCall:
    """A tool call arriving in pieces: id and name first, the arguments a few characters at
    a time. Some providers repeat id and name in every piece, so the first one wins."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, piece: dict[str, Any]) -> None:
        if not self.id and isinstance(piece.get("id"), str):
            self.id = piece["id"]
        function = piece.get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            raise malformed_reply("a streamed tool call's 'function' is not an object")
        if not self.name and isinstance(function.get("name"), str):
            self.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self.arguments.append(arguments)
        elif arguments is not None:
            self.arguments.append(json.dumps(arguments))


@dataclass
class Progress:
    """Whether the model has started its reply: any delta beyond the role (text, a tool
    call, a refusal, a provider's reasoning). A stream that breaks after that is not asked
    again: the new request would pay for the whole reply a second time."""

    started: bool = False


class _StreamedReply:
    """Folds chat-completion chunks into the final ``Completion``."""

    def __init__(self, fallback_model: str, quote: Quote, progress: Progress) -> None:
        self.ended = False
        self._progress = progress
        self._quote = quote
        self._model = fallback_model
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._finish_reason: str | None = None
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None

    @property
    def finished(self) -> bool:
        """Whether a choice carried its finish_reason: the answer is complete."""
        return self._finish_reason is not None

    def absorb(self, chunk: Any) -> str:
        """Take one chunk; return the answer text it carries ("" when none)."""
        if not isinstance(chunk, dict):
            raise malformed_reply(f"a stream chunk is a JSON {type(chunk).__name__}, not an object")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            said = _error_text(chunk)
            if said:
                raise malformed_reply(
                    f"the provider reported an error mid-stream: {self._quote(said)}"
                )
            raise malformed_reply("a stream chunk has no 'choices' list")
        self._model = _model(chunk, self._model)
        # Usage comes in the last chunk (choices empty); some providers send a running total
        # in every chunk, so the last one seen wins.
        self._usage = _usage(chunk.get("usage")) or self._usage
        return self._absorb_choice(choices[0]) if choices else ""

    def _absorb_choice(self, choice: Any) -> str:
        if not isinstance(choice, dict):
            raise malformed_reply("a stream chunk's choice is not an object")
        reason = _finish_reason(choice.get("finish_reason"))
        if reason:
            self.ended = True
            self._finish_reason = reason
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise malformed_reply("a stream chunk's 'delta' is not an object")
        if any(value for key, value in delta.items() if key != "role"):
            self._progress.started = True
        self._absorb_tool_calls(delta.get("tool_calls"))
        refusal = _content(delta.get("refusal"), "a stream chunk's delta.refusal")
        if refusal:
            self._refusal.append(refusal)
        text = _content(delta.get("content"), "a stream chunk's delta.content") or ""
        if text:
            self._text.append(text)
        return text

    def _absorb_tool_calls(self, pieces: Any) -> None:
        if pieces is None:
            return
        if not isinstance(pieces, list):
            raise malformed_reply("a stream chunk's 'tool_calls' is not a list")
        for position, piece in enumerate(pieces):
            index = piece.get("index", position) if isinstance(piece, dict) else None
            if not isinstance(index, int):
                raise malformed_reply("a streamed tool call has no integer 'index'")
            self._calls.setdefault(index, _PartialCall()).add(piece)

    def completion(self) -> Completion:
        calls = [
            _tool_call(number, part.id, part.name, "".join(part.arguments))
            for number, (_, part) in enumerate(sorted(self._calls.items()))
        ]
        return Completion(
            text="".join(self._text) or None,
            tool_calls=calls,
            usage=self._usage,
            model=self._model,
            finish_reason=self._finish_reason,
            refusal="".join(self._refusal) or None,
        )


async def read_event_stream(
    body: AsyncIterable[bytes], fallback_model: str, quote: Quote, progress: Progress
) -> AsyncGenerator[TextDelta | Completion, None]:
    """The deltas and the completion of an event-stream ``body``, read with Riverbeam's
    bounded decoder (``bot.clients.sse``; docs/models.md says why not the SDK's)."""
    streamed = _StreamedReply(fallback_model, quote, progress)
    try:
        async with contextlib.aclosing(aiter_events(body)) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    streamed.ended = True
                    break
                text = streamed.absorb(_event_json(event.data, quote))
                if text:
                    yield TextDelta(text=text)
    except RETRYABLE_TRANSPORT_ERRORS:
        # After its finish_reason the answer is whole: only the usage chunk and [DONE] were
        # still to come. Asking again would pay for the answer twice; its usage is unknown.
        if not streamed.finished:
            raise
    # A finish_reason also ends the answer: only the usage chunk and [DONE] can follow it.
    if not streamed.ended:
        raise RetryableFailure("BEM-060", "the stream ended before its last chunk")
    yield streamed.completion()


def _event_json(data: str, quote: Quote) -> Any:
    try:
        return jsonlimits.loads(data, what="a stream event")
    except ValueError:
        raise malformed_reply(f"a stream event is not JSON: {quote(data, 80)!r}") from None
