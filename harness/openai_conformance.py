"""Strict validation of request bodies against the official ``openai`` package's types.

``check_request(body)`` walks ``openai.types.chat.completion_create_params`` (the streaming
or non-streaming variant, as ``body["stream"]`` says) and raises ``NotConformant`` for a key
the type does not declare, a required key that is missing, or a value of the wrong type,
naming the path to it. pydantic cannot do this for the package's TypedDicts (it ignores
unknown keys in them and a ``TypeAdapter`` cannot be told otherwise), so the walk is here.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import typing_extensions
from openai.types.chat import completion_create_params

_TYPED_DICT_HINTS: dict[type, dict[str, Any]] = {}
_WRAPPERS = {
    typing.Annotated,
    typing.Required,
    typing.NotRequired,
    typing_extensions.Annotated,
    typing_extensions.Required,
    typing_extensions.NotRequired,
}


class NotConformant(AssertionError):
    """The body is not a valid ``CompletionCreateParams``."""


def check_request(body: Any) -> None:
    if not isinstance(body, dict):
        raise NotConformant(f"the body is a {type(body).__name__}, not an object")
    params = (
        completion_create_params.CompletionCreateParamsStreaming
        if body.get("stream") is True
        else completion_create_params.CompletionCreateParamsNonStreaming
    )
    problem = _problem(body, params, "body")
    if problem is not None:
        raise NotConformant(problem)


def _problem(value: Any, annotation: Any, path: str) -> str | None:
    origin = get_origin(annotation)
    if origin in _WRAPPERS:
        return _problem(value, get_args(annotation)[0], path)
    if origin in (Union, types.UnionType):
        problems = [_problem(value, option, path) for option in get_args(annotation)]
        if any(problem is None for problem in problems):
            return None
        return min((p for p in problems if p), key=_depth_first)
    if origin is Literal:
        return None if value in get_args(annotation) else f"{path}: {value!r} is not allowed"
    if typing_extensions.is_typeddict(annotation):
        return _typed_dict_problem(value, annotation, path)
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence):
        if not isinstance(value, list):
            return f"{path}: expected a list, got {type(value).__name__}"
        (item,) = get_args(annotation) or (Any,)
        for index, element in enumerate(value):
            problem = _problem(element, item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if origin in (dict, collections.abc.Mapping) or annotation in (dict, typing.Dict):  # noqa: UP006
        return None if isinstance(value, dict) else f"{path}: expected an object"
    return _scalar_problem(value, annotation, path)


def _scalar_problem(value: Any, annotation: Any, path: str) -> str | None:
    if annotation in (Any, object):
        return None
    if annotation is None or annotation is type(None):
        return None if value is None else f"{path}: expected null"
    if annotation is bool:
        return None if isinstance(value, bool) else f"{path}: expected a boolean"
    if annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"{path}: expected an integer"
    if annotation is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{path}: expected a number"
    if annotation is str:
        return None if isinstance(value, str) else f"{path}: expected a string"
    if isinstance(annotation, type):
        return None if isinstance(value, annotation) else f"{path}: expected {annotation}"
    raise NotConformant(f"{path}: the checker cannot read the type {annotation!r}")


def _typed_dict_problem(value: Any, cls: type, path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path}: expected an object ({cls.__name__})"
    hints = _hints(cls)
    unknown = sorted(set(value) - set(hints))
    if unknown:
        return f"{path}: {cls.__name__} has no field {unknown[0]!r}"
    for name, annotation in hints.items():
        if name not in value:
            if _required(cls, name, annotation):
                return f"{path}: {cls.__name__} needs {name!r}"
            continue
        problem = _problem(value[name], annotation, f"{path}.{name}")
        if problem is not None:
            return problem
    return None


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _TYPED_DICT_HINTS:
        _TYPED_DICT_HINTS[cls] = get_type_hints(cls, include_extras=True)
    return _TYPED_DICT_HINTS[cls]


def _required(cls: type, name: str, annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (typing.Annotated, typing_extensions.Annotated):
        return _required(cls, name, get_args(annotation)[0])
    if origin in (typing.Required, typing_extensions.Required):
        return True
    if origin in (typing.NotRequired, typing_extensions.NotRequired):
        return False
    return _declared_total(cls, name)


def _declared_total(cls: type, name: str) -> bool:
    """A field takes the totality of the TypedDict that declares it, not of a subclass."""
    for base in getattr(cls, "__orig_bases__", ()):
        if typing_extensions.is_typeddict(base) and name in base.__annotations__:
            return _declared_total(base, name)
    return bool(getattr(cls, "__total__", True))


def _depth_first(problem: str) -> int:
    """Of the union's failed branches, the one that got furthest says the most."""
    return -problem.split(":")[0].count(".") - problem.split(":")[0].count("[")


# -- replies built from the official types --------------------------------------------------


def chat_completion(
    content: str | None = None,
    *,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish_reason: str = "stop",
    refusal: str | None = None,
    usage: tuple[int, int] = (12, 5),
    extra_message: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``ChatCompletion`` as JSON; ``tool_calls`` are (id, name, arguments). ``extra`` and
    ``extra_message`` add fields a provider may send beyond the type (they are not validated
    against it, as a real provider's are not)."""
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice
    from openai.types.chat.chat_completion_message_function_tool_call import (
        ChatCompletionMessageFunctionToolCall,
        Function,
    )
    from openai.types.completion_usage import CompletionUsage

    calls = [
        ChatCompletionMessageFunctionToolCall(
            id=call_id, type="function", function=Function(name=name, arguments=arguments)
        )
        for call_id, name, arguments in tool_calls
    ]
    message = ChatCompletionMessage(
        role="assistant", content=content, refusal=refusal, tool_calls=calls or None
    )
    reply = ChatCompletion(
        id="chatcmpl-conformance",
        object="chat.completion",
        created=0,
        model="conformance-model",
        choices=[Choice(index=0, message=message, finish_reason=finish_reason)],  # type: ignore[arg-type]
        usage=CompletionUsage(
            prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=sum(usage)
        ),
    )
    document = reply.model_dump(mode="json", exclude_none=True)
    # The official API sends both as null when empty.
    document["choices"][0]["message"].setdefault("content", None)
    document["choices"][0]["message"].setdefault("refusal", None)
    document["choices"][0]["message"].update(extra_message or {})
    document.update(extra or {})
    return document


def chunk(
    *,
    content: str | None = None,
    refusal: str | None = None,
    tool_call: tuple[int, str | None, str | None, str] | None = None,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
    extra_delta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``ChatCompletionChunk`` as JSON: a delta (text, refusal, or a tool call piece as
    (index, id, name, arguments)), a finish reason, or with ``usage`` the choice-less last
    chunk ``stream_options.include_usage`` asks for."""
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import (
        Choice,
        ChoiceDelta,
        ChoiceDeltaToolCall,
        ChoiceDeltaToolCallFunction,
    )
    from openai.types.completion_usage import CompletionUsage

    base: dict[str, Any] = {
        "id": "chatcmpl-conformance",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "conformance-model",
    }
    if usage is not None:
        counts = CompletionUsage(
            prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=sum(usage)
        )
        return ChatCompletionChunk(**base, choices=[], usage=counts).model_dump(
            mode="json", exclude_none=True
        )
    pieces = None
    if tool_call is not None:
        index, call_id, name, arguments = tool_call
        function = ChoiceDeltaToolCallFunction(name=name, arguments=arguments)
        kind = "function" if call_id else None
        pieces = [ChoiceDeltaToolCall(index=index, id=call_id, type=kind, function=function)]
    delta = ChoiceDelta(content=content, refusal=refusal, tool_calls=pieces)
    choice = Choice(index=0, delta=delta, finish_reason=finish_reason)  # type: ignore[arg-type]
    document = ChatCompletionChunk(**base, choices=[choice]).model_dump(
        mode="json", exclude_none=True
    )
    document["choices"][0]["delta"].update(extra_delta or {})
    return document
